"""The pairs labels are about: a build's judged candidate pairs and an audit's (positive,
negative) pairs, each with a stable ``pair_id``, both texts, its ``p_same`` and whether pairsieve
put the two in one product.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.config import ClusterConfig
from pairsieve.core.contract import load_result
from pairsieve.core.facts import ClusterFacts
from pairsieve.core.hashing import hex_digest
from pairsieve.core.layout import RunLayout
from pairsieve.errors import PairsieveError
from pairsieve.labels import sample
from pairsieve.labels.store import write_labels

LINKED = "linked"  # the two are in one product id
GROUP = "group"  # a build's pair: what pairsieve did with it (`sample.build_groups`)
ROWS = "rows"  # an audit pair: how many of the dataset's negatives it is


def pair_id(source: str, first: str, second: str) -> str:
    """The id of an unordered pair of listings (``candidate``) or an ordered (positive,
    negative) text pair (``audit``)."""
    if source == "candidate":
        first, second = sorted((first, second))
    return source[0] + hex_digest(first + "\x1f" + second)


def pair_ids(source: str, first: str, second: str) -> pl.Expr:
    """`pair_id` of every row's (``first``, ``second``) column values."""
    return pl.struct(first, second).map_elements(
        lambda r: pair_id(source, r[first], r[second]), return_dtype=pl.String
    )


def candidate_pairs(run_dir: str | Path) -> pl.DataFrame:
    """Every judged candidate pair of a build folder: pair_id, listing ids, titles, p_same,
    linked and group (`sample.build_groups`, with the accept probability the build used).

    Raises:
        PairsieveError: ``missing_file`` without a clustering, ``bad_input`` when it has no
        ``p_same`` (made by the rule judge).
    """
    layout = RunLayout(run_dir)
    pairs_path, products_path = layout.pairs, layout.products
    if not pairs_path.exists():
        raise PairsieveError("missing_file", "no cluster/pairs.parquet", file=str(pairs_path))
    pairs = pl.read_parquet(pairs_path).filter(pl.col(S.SIGNAL) != "exact")
    if S.P_SAME not in pairs.columns or 0 < pairs.height == pairs[S.P_SAME].null_count():
        raise PairsieveError(
            "bad_input", "the clustering has no p_same (rule judge)", file=str(pairs_path)
        )
    titles = pl.read_parquet(layout.listings, columns=[S.LISTING_ID, S.TITLE])
    product = pl.read_parquet(products_path, columns=[S.LISTING_ID, S.PRODUCT_ID])
    out = pairs.select(
        S.LISTING_A,
        S.LISTING_B,
        pl.col(S.P_SAME).cast(pl.Float64),
        pl.col(S.VETO_REASON).is_not_null().alias("_vetoed"),
        S.LINK_SCORE,
    )
    for end, suffix in ((S.LISTING_A, "a"), (S.LISTING_B, "b")):
        out = out.join(
            titles.rename({S.LISTING_ID: end, S.TITLE: f"text_{suffix}"}), on=end, how="left"
        ).join(product.rename({S.LISTING_ID: end, S.PRODUCT_ID: f"_p{suffix}"}), on=end)
    out = out.with_columns((pl.col("_pa") == pl.col("_pb")).alias(LINKED))
    groups = sample.build_groups(
        out[LINKED].to_numpy(),
        out["_vetoed"].to_numpy(),
        out[S.LINK_SCORE].to_numpy(),
        _accept_probability(layout),
    )
    return out.with_columns(pl.Series(GROUP, groups)).select(
        pair_ids("candidate", S.LISTING_A, S.LISTING_B).alias("pair_id"),
        S.LISTING_A,
        S.LISTING_B,
        "text_a",
        "text_b",
        S.P_SAME,
        pl.lit("candidate").alias("source"),
        LINKED,
        GROUP,
    )


def _accept_probability(layout: RunLayout) -> float:
    """The pair model's accept probability the build's clustering used (recorded in its
    stage.json; the default for a build that predates the record)."""
    recorded = load_result(layout.stage_dir("cluster"))
    accept = None if recorded is None else ClusterFacts.of(recorded).accept_probability
    return ClusterConfig().accept_probability if accept is None else accept


def audit_pairs(audit_dir: str | Path) -> pl.DataFrame:
    """The (positive, negative) pairs of an audit, one row per distinct pair: pair_id, listing
    ids, texts, p_same, linked and ``rows`` (how many negatives of the dataset it is).

    Raises:
        PairsieveError: ``missing_file`` when the folder holds no audit.
    """
    path = Path(audit_dir) / S.AUDIT_PAIRS_FILE
    if not path.exists():
        raise PairsieveError(
            "missing_file", "not an audit folder (or its clustering had no p_same)", file=str(path)
        )
    return pl.read_parquet(path)


def judged_pairs(run_dir: str | Path) -> pl.DataFrame | None:
    """The negatives a build kept above the margin, as pairs to label (`report.judged`), or
    None when its report has none: their ``p_same`` is the judgement's ``p_copy``."""
    path = RunLayout(run_dir).stage_dir("report") / S.JUDGED_PAIRS_FILE
    if not path.exists():
        return None
    return pl.read_parquet(path).with_columns(pl.lit("negative").alias("source"))


def write_sample(run_dir: Path | None, audit_dir: Path | None, n: int, seed: int, out: Path) -> int:
    """Draw ``n`` pairs to label from a build's candidates, ``n`` from the negatives it kept
    above the margin (when its report lists them) and ``n`` from an audit's pairs (whichever
    folders are given), stratified by p_same (a build's candidates also by whether pairsieve
    merged the pair, `sample.draw`), and write them as a label file with every label null (a
    pair drawn twice once); returns the pairs written.

    Raises:
        PairsieveError: ``bad_argument`` when neither folder is given.
    """
    if run_dir is None and audit_dir is None:
        raise PairsieveError("bad_argument", "give --run, --audit or both")
    # A build's labels split by what pairsieve did with the pair (its precision needs merged
    # pairs, its vetoes the pairs they held apart); an audit's do not (its one figure, the
    # false-negative rate, needs every label over all its pairs).
    sources = [(candidate_pairs(run_dir), GROUP)] if run_dir is not None else []
    negatives = judged_pairs(run_dir) if run_dir is not None else None
    sources += [(negatives, None)] if negatives is not None else []
    sources += [(audit_pairs(audit_dir), None)] if audit_dir is not None else []
    columns = ["pair_id", S.LISTING_A, S.LISTING_B, "text_a", "text_b", S.P_SAME, "source"]
    drawn = pl.concat(
        [
            sample.draw(frame, n, seed, by=by, shares=sample.BUILD_SHARES).select(
                *columns, "stratum", "weight"
            )
            for frame, by in sources
        ]
    ).unique("pair_id", keep="first", maintain_order=True)
    rows = drawn.with_columns(pl.lit(None, dtype=pl.Boolean).alias("label"))
    write_labels(rows, out)
    return rows.height
