"""Title text: normalisation, attribute extraction, and comparing two titles' attributes."""
