"""Maps (`pairsieve.core.partitions.MapSpans`) that run spans as workers would, for tests that
check a mapped step's bytes do not depend on where its spans run."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from pairsieve.core import partitions


def from_disk(fn, plan, spans, cfg, step):
    """Each span in this process, reading the plan from disk as a fresh worker would."""
    results = []
    for span in spans:
        partitions.forget(plan)
        results.append(fn(plan, span, cfg))
    return results


def in_processes(fn, plan, spans, cfg, step):
    """Each span in a fresh process started with one BLAS and OpenMP thread (a Dask worker's
    setting); the results come back last span first, then are put in span order."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        futures = {span: pool.submit(fn, plan, span, cfg) for span in spans}
        done = {span: futures[span].result() for span in reversed(spans)}
    return [done[span] for span in spans]
