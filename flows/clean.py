"""Deployment entrypoint of the `clean` flow (the flow is `pairsieve.orchestration.flows.clean`).

Cleans run on demand with the dataset and the catalog as parameters (`prefect deployment run
'clean/pairsieve-clean' -p dataset=... -p catalog=... -p out=...`).
"""

from __future__ import annotations

from pairsieve.orchestration.flows import clean, on_demand_deployment

__all__ = ["clean"]

if __name__ == "__main__":
    from prefect import serve

    serve(on_demand_deployment(clean))
