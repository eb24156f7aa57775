"""Deployment entrypoint of the `audit` flow (the flow is `pairsieve.orchestration.flows.audit`).

Audits run on demand with the dataset as a parameter (`prefect deployment run
'audit/pairsieve-audit' -p dataset=... -p out=...`), or weekly when a schedule is given.
"""

from __future__ import annotations

from pairsieve.orchestration.flows import AUDIT_SCHEDULE, audit, on_demand_deployment

__all__ = ["audit"]

if __name__ == "__main__":
    from prefect import serve

    serve(on_demand_deployment(audit, cron=AUDIT_SCHEDULE))
