"""Stage 5: what duplicates cost and what was removed, as JSON and HTML."""
