"""Labels from a user: which pairs to ask about, the label file, and estimates with intervals."""
