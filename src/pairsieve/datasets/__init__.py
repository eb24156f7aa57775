"""Loaders for public benchmarks and the synthetic marketplace / click-log generators."""
