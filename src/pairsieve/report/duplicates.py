"""The report's duplicates section: listings per product, the largest clusters, the vetoes that
kept pairs apart, and how sure the same-product judgement was."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.report.sections import chart, section

SIZE_BUCKETS = ((1, 1), (2, 2), (3, 3), (4, 5), (6, 10), (11, 20), (21, 50), (51, None))


def size_histogram(sizes: np.ndarray) -> list[dict[str, Any]]:
    """Products and listings per cluster-size bucket."""
    rows = []
    for lo, hi in SIZE_BUCKETS:
        mask = (sizes >= lo) & (sizes <= (hi if hi is not None else np.inf))
        label = f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi else f">{lo - 1}")
        rows.append(
            {"size": label, "products": int(mask.sum()), "listings": int(sizes[mask].sum())}
        )
    return rows


def _largest_clusters(
    products: pl.DataFrame, titles: pl.DataFrame, sizes: pl.DataFrame, largest: int
) -> list[dict[str, Any]]:
    """The ``largest`` products by listings (ties by id), each with up to three of its titles."""
    top = sizes.sort(["size", S.PRODUCT_ID], descending=[True, False]).head(largest)
    samples = (
        products.join(titles, on=S.LISTING_ID, how="left")
        .join(top, on=S.PRODUCT_ID)
        .sort([S.PRODUCT_ID, S.TITLE])
        .group_by(S.PRODUCT_ID, maintain_order=True)
        .agg(pl.col(S.TITLE).unique(maintain_order=True).head(3).alias("samples"))
    )
    return [
        {"product_id": pid, "listings": int(size), "sample titles": " | ".join(sample)}
        for pid, size, sample in top.join(samples, on=S.PRODUCT_ID, how="left")
        .sort(["size", S.PRODUCT_ID], descending=[True, False])
        .select(S.PRODUCT_ID, "size", "samples")
        .iter_rows()
    ]


def duplicates_section(
    products: pl.DataFrame, titles: pl.DataFrame, pairs: pl.LazyFrame | None, largest: int = 10
) -> dict[str, Any]:
    """Listings per product: how many listings have a duplicate, the largest clusters, vetoes.

    ``products`` has listing_id and product_id, ``titles`` listing_id and title. ``pairs`` (the
    cluster stage's pairs.parquet, scanned) is only aggregated, in a streaming query over the
    columns it needs: at 10^6 listings it holds 3e7 pairs, several GB when read whole.
    """
    sizes_df = products.group_by(S.PRODUCT_ID).len("size")
    sizes = sizes_df["size"].to_numpy()
    histogram = size_histogram(sizes)
    largest_rows = _largest_clusters(products, titles, sizes_df, largest)
    listings = int(sizes.sum())
    figures = {
        "listings": listings,
        "products": int(len(sizes)),
        "listings_with_duplicate": int(sizes[sizes > 1].sum()),
        "share_with_duplicate": float(sizes[sizes > 1].sum() / listings) if listings else 0.0,
        "largest_cluster": int(sizes.max()) if len(sizes) else 0,
    }
    charts = [
        chart(
            "cluster-sizes",
            "Cluster-size histogram",
            [r["size"] for r in histogram],
            {
                "products": [r["products"] for r in histogram],
                "listings": [r["listings"] for r in histogram],
            },
            y_label="products or listings (log scale)",
            x_label="listings per product",
            log=True,
        )
    ]
    tables = {"cluster sizes": histogram, "largest clusters": largest_rows}
    columns = [] if pairs is None else pairs.collect_schema().names()
    if S.VETO_REASON in columns:
        add_vetoes(pairs, figures, tables, charts)
    if S.P_SAME in columns:
        add_judgement(pairs, figures, charts)
    return section("Duplicates", figures=figures, tables=tables, charts=charts)


def add_judgement(pairs: pl.LazyFrame, figures: dict, charts: list) -> None:
    """How sure the same-product judgement is: the mean ``p_same`` of the candidate pairs it
    accepted and of those it did not, and how well ``p_same`` has held on labelled catalogs it
    was not fitted on (`calibration`). Nothing when no pair has a ``p_same`` (the rule
    judge's pairs)."""
    from pairsieve.pair_model.calibration import BINS, load_calibration

    scored, accepted = pl.col(S.SIGNAL) != "exact", pl.col(S.ACCEPTED)
    p_same = pl.col(S.P_SAME).cast(pl.Float64)
    means = pairs.select(
        p_same.is_not_null().any().alias("known"),
        p_same.filter(scored & accepted).mean().alias("accepted"),
        p_same.filter(scored & ~accepted).mean().alias("rejected"),
    ).collect(engine="streaming")
    if not means["known"].item():
        return
    figures["mean_p_same_accepted"] = means["accepted"].item()
    figures["mean_p_same_rejected"] = means["rejected"].item()
    shipped = load_calibration()
    figures["calibration_error"] = shipped.error
    held_out = shipped.held_out
    if not held_out:
        return
    series = {"predicted (bin middle)": [(i + 0.5) / BINS for i in range(BINS)]}
    series.update({f"observed, {name}": table["rate"] for name, table in held_out.items()})
    charts.append(
        chart(
            "calibration",
            "p_same against the truth, on catalogs held out of its fit",
            [f"{round(100 * i / BINS)}–{round(100 * (i + 1) / BINS)}%" for i in range(BINS)],
            series,
            y_label="true pairs (%)",
            x_label="p_same",
            percent=True,
        )
    )


def add_vetoes(pairs: pl.LazyFrame, figures: dict, tables: dict, charts: list) -> None:
    """Candidate pairs accepted and vetoed, with the veto reasons, into the duplicates section."""
    vetoed = pairs.filter(~pl.col(S.ACCEPTED) & pl.col(S.VETO_REASON).is_not_null())
    counts, vetoes = pl.collect_all(
        [
            pairs.select(pl.len(), pl.col(S.ACCEPTED).sum()),
            vetoed.group_by(S.VETO_REASON).len("pairs"),
        ],
        engine="streaming",
    )
    vetoes = vetoes.sort(["pairs", S.VETO_REASON], descending=[True, False])
    tables["merges vetoed, by reason"] = vetoes.rename({S.VETO_REASON: "reason"}).to_dicts()
    figures["candidate_pairs"] = int(counts["len"].item())
    figures["accepted_pairs"] = int(counts[S.ACCEPTED].item())
    figures["vetoed_pairs"] = int(vetoes["pairs"].sum())
    if vetoes.height:
        charts.append(
            chart(
                "vetoes",
                "Merges vetoed, by reason",
                vetoes[S.VETO_REASON].to_list(),
                {"pairs": vetoes["pairs"].to_list()},
                y_label="candidate pairs",
            )
        )
