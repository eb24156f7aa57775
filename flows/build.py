"""Deployment entrypoint of the scheduled `build` flow (`pairsieve.orchestration.flows.build`).

`prefect deploy` reads `flows/prefect.yaml` (entrypoint `flows/build.py:build`);
`python flows/build.py` serves the deployment from this process, like `pairsieve serve`.
"""

from __future__ import annotations

from pairsieve.orchestration.flows import BUILD_SCHEDULE, build, build_deployment

__all__ = ["build"]

# The bundled sample; production deployments override these in prefect.yaml or the UI.
PARAMETERS = {
    "clicks": "data/sample/clicks.parquet",
    "catalog": "data/sample/catalog.parquet",
    "out": "runs/nightly",
}

if __name__ == "__main__":
    from prefect import serve

    serve(build_deployment(PARAMETERS, BUILD_SCHEDULE))
