"""Shared plumbing every stage stands on: the stage contract, parquet I/O, memory, parallelism."""
