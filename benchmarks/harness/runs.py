"""How an experiment's runs are kept in the repo (`benchmarks/experiment_runs/`): per-query scores
keyed by a hash of the query text, as no text of a benchmark catalog is kept.
"""

QUERY_KEY = "query_key"  # a kept run's query, as `text_key` of its text
