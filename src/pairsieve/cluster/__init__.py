"""Stage 2: cluster listings into product ids (candidates, pair verification, linkage)."""
