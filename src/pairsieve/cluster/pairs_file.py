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
    from pairsieve.pair_model.calibration import Calibration


class Clustered(Protocol):
    """What the file is built from (a `cluster.stage.Clustering`): the listings with their
    nodes, the nodes, and the scored node pairs."""

    frame: pl.DataFrame
    nodes: pl.DataFrame
    scored: pl.DataFrame


def _p_same(scored: pl.DataFrame, calibration: Calibration | None) -> pl.Series:
    """``p_same`` of every scored pair: the column the pairs carry (a pair model refitted to
    labels scores them, the shipped one's calibration gives p_same), else the calibration of
    their score (null without a calibration)."""
    if S.P_SAME in scored.columns:
        return scored[S.P_SAME]
    if calibration is None:
        return pl.repeat(None, len(scored), dtype=pl.Float32, eager=True).alias(S.P_SAME)
    vetoed = scored[S.VETO_REASON].is_not_null().to_numpy()
    return pl.Series(S.P_SAME, calibration.p_same(scored["score"].to_numpy(), vetoed))


_CHUNK = 1 << 19  # rows of the file built at a time: ~50 MB of rows, and their gathers


@dataclass(frozen=True)
class _Rows:
    """The file's rows: the scored pairs (source rows 0..n-1), then one row per listing that
    shares its node's title (rows n..). ``order`` lists source rows in file order. A scored
    row i joins the representatives of nodes ``ends_of_scored`` (a, b) of row i; a sharing row
    n + j joins the representative of node ``node[j]`` and entry ``listing[j]`` of ``ids``
    (the nodes' representatives, then every listing)."""

    order: np.ndarray
    ends_of_scored: pl.DataFrame
    node: np.ndarray
    listing: np.ndarray
    reps: pl.Series
    ids: pl.Series

    def ends(self, sel: np.ndarray) -> pl.DataFrame:
        """(listing_a, listing_b) of the source rows ``sel``."""
        n = len(self.ends_of_scored)
        scored, sharing = sel < n, sel >= n
        first, second = np.empty(len(sel), np.int64), np.empty(len(sel), np.int64)
        pairs = self.ends_of_scored[sel[scored]]
        first[scored], second[scored] = pairs["a"].to_numpy(), pairs["b"].to_numpy()
        first[sharing] = self.node[sel[sharing] - n]
        second[sharing] = self.listing[sel[sharing] - n]
        return pl.DataFrame(
            [self.reps.gather(first).alias(S.LISTING_A), self.ids.gather(second).alias(S.LISTING_B)]
        )


def _rows(result: Clustered) -> _Rows:
    """Sorted by the listing ids' ranks (one int64 key per row) rather than by the two strings:
    the same order, as ``frame`` is sorted by listing id and no two rows share (listing_a,
    listing_b). The keys are made `_CHUNK` pairs at a time from the scored columns: the
    columns come in many chunks (one per judged span), so taking them whole as numpy would
    copy both (0.46 GiB at 10^6 listings) and hold the copies while the file is written."""
    frame, scored = result.frame, result.scored
    rank = frame[S.LISTING_ID].rank("dense").cast(pl.Int64).to_numpy()
    frame_nodes = frame[_NODE].to_numpy().astype(np.int64)
    node_rank = np.empty(len(result.nodes), dtype=np.int64)
    nodes, first = np.unique(frame_nodes, return_index=True)  # first = smallest listing
    node_rank[nodes] = rank[first]
    n = len(scored)
    sharing = np.flatnonzero(rank != node_rank[frame_nodes])  # listings besides their node's rep
    keys = np.empty(n + len(sharing), dtype=np.int64)
    for lo in range(0, n, _CHUNK):
        span = scored.slice(lo, _CHUNK)
        a, b = span["a"].to_numpy(), span["b"].to_numpy()
        keys[lo : lo + len(span)] = (node_rank[a] << 32) | node_rank[b]
    np.left_shift(node_rank[frame_nodes[sharing]], 32, out=keys[n:])
    keys[n:] |= rank[sharing]
    order = np.argsort(keys)
    del keys
    reps = result.nodes[S.LISTING_ID].rechunk()
    # One chunk each before gathering: a gather from a two-chunk string column took 8x longer.
    ids = pl.concat([reps, frame[S.LISTING_ID]], rechunk=True)  # node reps, then every listing
    ends = scored.select("a", "b")
    return _Rows(order, ends, frame_nodes[sharing], len(reps) + sharing, reps, ids)


def _values(scored: pl.DataFrame, calibration: Calibration | None) -> pl.DataFrame:
    """The file's value columns of some scored pairs."""
    return scored.select(
        pl.col(S.JACCARD).cast(pl.Float64),
        pl.col(S.COSINE).cast(pl.Float64),
        pl.col("score").cast(pl.Float64).alias(S.LINK_SCORE),
        pl.col(S.SIGNAL).cast(pl.String),
        pl.col(S.ACCEPTED).cast(pl.Boolean),
        pl.col(S.VETO_REASON).cast(pl.String),
    ).with_columns(_p_same(scored, calibration).cast(pl.Float32))


def _sharing_values(calibration: Calibration | None) -> dict:
    """The values of every row between a listing and its node's representative."""
    return {S.JACCARD: 1.0, S.COSINE: 1.0, S.LINK_SCORE: 1.0, S.SIGNAL: "exact",
            S.ACCEPTED: True, S.VETO_REASON: None,
            S.P_SAME: None if calibration is None else calibration.exact}  # fmt: skip


def write_pairs(result: Clustered, calibration: Calibration | None, path: Path) -> Path:
    """Write pairs.parquet: every scored candidate (by representative listing), plus exact
    duplicates, sorted by (listing_a, listing_b). With ``calibration`` (the scores are the
    learned pair model's), each pair gets its ``p_same``; without, ``p_same`` is null.

    The file is built `_CHUNK` rows at a time into part files beside it and streamed into it:
    the whole table (~95 bytes a pair, 32 M pairs at 10^6 listings) is never in memory, only
    the scored pairs it is gathered from, their order and a chunk. Each chunk's strings and
    probabilities are made from the chunk's rows alone.
    """
    rows = _rows(result)
    scored = result.scored
    n = len(scored)
    schema = _values(scored[:0], None).schema
    sharing = pl.DataFrame({k: [v] for k, v in _sharing_values(calibration).items()}, schema=schema)
    folder = path.parent / f".{path.name}.parts"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        parts = []
        for lo in range(0, max(len(rows.order), 1), _CHUNK):
            sel = rows.order[lo : lo + _CHUNK]
            scored_at, sharing_at = np.flatnonzero(sel < n), np.flatnonzero(sel >= n)
            values = _values(scored[sel[scored_at]], calibration)
            both = pl.concat([values, sharing[np.zeros(len(sharing_at), np.int64)]])
            back = np.empty(len(sel), np.int64)  # chunk row -> row of ``both``
            back[scored_at] = np.arange(len(scored_at))
            back[sharing_at] = len(scored_at) + np.arange(len(sharing_at))
            chunk = rows.ends(sel).hstack(both[back].get_columns())
            parts.append(io.write_parquet(chunk, folder / f"{len(parts):06d}.parquet"))
        return io.write_parquet(pl.scan_parquet(parts), path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
