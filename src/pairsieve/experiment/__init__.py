"""Judge the hygiene by the model it trains: arms side by side on held-out retrieval."""
