"""Stage 3: mine hard negatives that exclude the positive's product and respect a margin."""
