"""Stage 4: write product-disjoint, labelled training shards."""
