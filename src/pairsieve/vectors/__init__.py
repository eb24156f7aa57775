"""Vectors of titles and queries: embeddings (torch or ONNX), MinHash signatures, kNN search."""
