"""Audit a contrastive dataset built elsewhere for false negatives."""
