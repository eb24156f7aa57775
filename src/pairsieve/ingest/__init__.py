"""Stage 1: validate the click log and the catalog, quarantine bad rows with reasons."""
