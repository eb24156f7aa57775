"""pairs.parquet: every judged candidate pair of a clustering, by listing, with its scores,
signals, decision and ``p_same``, plus a row per listing that shares its node's title."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.cluster.candidates import NODE as _NODE
from pairsieve.core import io

if TYPE_CHECKING:
    from pairsieve.cluster.calibration import Calibration


class Clustered(Protocol):
    """What the file is built from (a `cluster.stage.Clustering`): the listings with their
    nodes, the nodes, and the scored node pairs."""

    frame: pl.DataFrame
    nodes: pl.DataFrame
    scored: pl.DataFrame


def _p_same(scored: pl.DataFrame, calibration: Calibration | None) -> pl.Series:
    """``p_same`` of every scored pair (null without a calibration)."""
    if calibration is None:
        return pl.repeat(None, len(scored), dtype=pl.Float32, eager=True).alias(S.P_SAME)
    vetoed = scored[S.VETO_REASON].is_not_null().to_numpy()
    return pl.Series(S.P_SAME, calibration.p_same(scored["score"].to_numpy(), vetoed))


_CHUNK = 1 << 21  # rows of the file built at a time


@dataclass(frozen=True)
class _Rows:
    """The file's rows: the scored pairs (source rows 0..n-1), then one row per listing that
    shares its node's title (rows n..). ``order`` lists source rows in file order; ``a`` and
    ``b`` give each source row's listing_a in ``reps`` and listing_b in ``ids``."""

    order: np.ndarray
    a: np.ndarray
    b: np.ndarray
    reps: pl.Series
    ids: pl.Series


def _rows(result: Clustered) -> _Rows:
    """Sorted by the listing ids' ranks (one int64 key per row) rather than by the two strings:
    the same order, as ``frame`` is sorted by listing id and no two rows share (listing_a,
    listing_b)."""
    frame, scored = result.frame, result.scored
    rank = frame[S.LISTING_ID].rank("dense").cast(pl.Int64).to_numpy()
    frame_nodes = frame[_NODE].to_numpy().astype(np.int64)
    node_rank = np.empty(len(result.nodes), dtype=np.int64)
    nodes, first = np.unique(frame_nodes, return_index=True)  # first = smallest listing
    node_rank[nodes] = rank[first]
    a = scored["a"].to_numpy().astype(np.int64, copy=False)
    b = scored["b"].to_numpy().astype(np.int64, copy=False)
    exact = np.flatnonzero(rank != node_rank[frame_nodes])  # listings besides their node's rep
    keys = np.concatenate(
        [(node_rank[a] << 32) | node_rank[b], (node_rank[frame_nodes[exact]] << 32) | rank[exact]]
    )
    order = np.argsort(keys)
    del keys
    reps = result.nodes[S.LISTING_ID].rechunk()
    # One chunk each before gathering: a gather from a two-chunk string column took 8x longer.
    ids = pl.concat([reps, frame[S.LISTING_ID]], rechunk=True)  # node reps, then every listing
    return _Rows(
        order,
        np.concatenate([a, frame_nodes[exact]]),
        np.concatenate([b, len(reps) + exact]),
        reps,
        ids,
    )


def _values(scored: pl.DataFrame, calibration: Calibration | None) -> tuple[pl.DataFrame, ...]:
    """The scored pairs' value columns (the same buffers, not a copy), and the one row of
    values every listing that shares its node's title gets."""
    values = scored.select(
        pl.col(S.JACCARD).cast(pl.Float64),
        pl.col(S.COSINE).cast(pl.Float64),
        pl.col("score").cast(pl.Float64).alias(S.LINK_SCORE),
        pl.col(S.SIGNAL).cast(pl.String),
        pl.col(S.ACCEPTED).cast(pl.Boolean),
        pl.col(S.VETO_REASON).cast(pl.String),
    ).with_columns(_p_same(scored, calibration).cast(pl.Float32))
    exact = {S.JACCARD: 1.0, S.COSINE: 1.0, S.LINK_SCORE: 1.0, S.SIGNAL: "exact",
             S.ACCEPTED: True, S.VETO_REASON: None,
             S.P_SAME: None if calibration is None else calibration.exact}  # fmt: skip
    return values, pl.DataFrame({k: [v] for k, v in exact.items()}, schema=values.schema)


def write_pairs(result: Clustered, calibration: Calibration | None, path: Path) -> Path:
    """Write pairs.parquet: every scored candidate (by representative listing), plus exact
    duplicates, sorted by (listing_a, listing_b). With ``calibration`` (the scores are the
    learned pair model's), each pair gets its ``p_same``; without, ``p_same`` is null.

    The file is built `_CHUNK` rows at a time into part files beside it and streamed into it:
    the whole table (~95 bytes a pair, 32 M pairs at 10^6 listings) is never in memory, only
    the scored pairs it is gathered from and a chunk.
    """
    rows = _rows(result)
    values, exact = _values(result.scored, calibration)
    n = len(values)
    folder = path.parent / f".{path.name}.parts"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        parts = []
        for lo in range(0, max(len(rows.order), 1), _CHUNK):
            sel = rows.order[lo : lo + _CHUNK]
            scored_at, exact_at = np.flatnonzero(sel < n), np.flatnonzero(sel >= n)
            both = pl.concat([values[sel[scored_at]], exact[np.zeros(len(exact_at), np.int64)]])
            back = np.empty(len(sel), np.int64)  # chunk row -> row of ``both``
            back[scored_at] = np.arange(len(scored_at))
            back[exact_at] = len(scored_at) + np.arange(len(exact_at))
            ends = pl.DataFrame(
                [
                    rows.reps.gather(rows.a[sel]).alias(S.LISTING_A),
                    rows.ids.gather(rows.b[sel]).alias(S.LISTING_B),
                ]
            )
            chunk = ends.hstack(both[back].get_columns())
            parts.append(io.write_parquet(chunk, folder / f"{len(parts):06d}.parquet"))
        return io.write_parquet(pl.scan_parquet(parts), path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
