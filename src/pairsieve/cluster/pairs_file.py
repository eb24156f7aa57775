"""pairs.parquet: every judged candidate pair of a clustering, by listing, with its scores,
signals, decision and ``p_same``, plus a row per listing that shares its node's title."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.cluster.candidates import NODE as _NODE

if TYPE_CHECKING:
    from pairsieve.cluster.calibration import Calibration


class Clustered(Protocol):
    """What the file is built from (a `cluster.stage.Clustering`): the listings with their
    nodes, the nodes, and the scored node pairs (set to None to release them)."""

    frame: pl.DataFrame
    nodes: pl.DataFrame
    scored: pl.DataFrame | None


def _p_same(scored: pl.DataFrame, calibration: Calibration | None) -> pl.Series:
    """``p_same`` of every scored pair (null without a calibration)."""
    if calibration is None:
        return pl.repeat(None, len(scored), dtype=pl.Float32, eager=True).alias(S.P_SAME)
    vetoed = scored[S.VETO_REASON].is_not_null().to_numpy()
    return pl.Series(S.P_SAME, calibration.p_same(scored["score"].to_numpy(), vetoed))


def pairs_frame(
    result: Clustered, calibration: Calibration | None = None, consume: bool = False
) -> pl.DataFrame:
    """pairs.parquet: every scored candidate (by representative listing), plus exact duplicates,
    sorted by (listing_a, listing_b). With ``calibration`` (the scores are the learned pair
    model's), each pair gets its ``p_same``; without, ``p_same`` is null. ``consume``: drop
    ``result.scored`` column by column while building (it is the other copy of tens of millions
    of rows at 10^6 listings)."""
    # Sorted by the listing ids' ranks (one int64 key per row) rather than by the two strings:
    # the same order, as ``frame`` is sorted by listing id and no two rows share (listing_a,
    # listing_b). Each output column is gathered once in that order, so the id strings are
    # built once (not built, concatenated and sorted).
    frame, scored = result.frame, result.scored
    rank = frame[S.LISTING_ID].rank("dense").cast(pl.Int64).to_numpy()
    frame_nodes = frame[_NODE].to_numpy().astype(np.int64)
    node_rank = np.empty(len(result.nodes), dtype=np.int64)
    nodes, first = np.unique(frame_nodes, return_index=True)  # first = smallest listing
    node_rank[nodes] = rank[first]
    a = scored["a"].to_numpy().astype(np.int64)
    b = scored["b"].to_numpy().astype(np.int64)
    exact = np.flatnonzero(rank != node_rank[frame_nodes])  # listings besides their node's rep
    keys = np.concatenate(
        [(node_rank[a] << 32) | node_rank[b], (node_rank[frame_nodes[exact]] << 32) | rank[exact]]
    )
    order = np.argsort(keys)
    del keys
    reps = result.nodes[S.LISTING_ID].rechunk()
    # One chunk each before gathering: a gather from a two-chunk string column took 8x longer.
    ids = pl.concat([reps, frame[S.LISTING_ID]], rechunk=True)  # node reps, then every listing
    columns = [
        reps.gather(np.concatenate([a, frame_nodes[exact]])[order]).alias(S.LISTING_A),
        ids.gather(np.concatenate([b, len(reps) + exact])[order]).alias(S.LISTING_B),
    ]
    del a, b
    rest = [
        (S.JACCARD, 1.0, pl.Float64),
        (S.COSINE, 1.0, pl.Float64),
        (S.LINK_SCORE, 1.0, pl.Float64),
        (S.SIGNAL, "exact", pl.String),
        (S.ACCEPTED, True, pl.Boolean),
        (S.VETO_REASON, None, pl.String),
    ]
    sources = {name: scored[name] for name, _, _ in rest if name != S.LINK_SCORE}
    sources[S.LINK_SCORE] = scored["score"].alias(S.LINK_SCORE)
    rest.append((S.P_SAME, None if calibration is None else calibration.exact, pl.Float32))
    sources[S.P_SAME] = _p_same(scored, calibration)
    if consume:
        result.scored = scored = None
    for name, exact_value, dtype in rest:
        filler = pl.repeat(exact_value, len(exact), dtype=dtype, eager=True).alias(name)
        both = pl.concat([sources.pop(name).cast(dtype), filler], rechunk=True)
        columns.append(both.gather(order))
        del both
    return pl.DataFrame(columns)
