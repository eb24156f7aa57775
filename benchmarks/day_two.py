"""Day 2 through `pairsieve build --previous`, against day 1 in the same run, as a user runs both.

Takes a generated marketplace (``clicks.parquet`` and ``catalog.parquet`` with
`true_product_id`) and an embedding cache, warm or not. Day 2 is the same catalog with
``--changed`` of the listings retitled (their first word moved to the end: a reworded copy, a
new text to embed) and ``--new-clicks`` more click rows, a day after the last: each sampled
click again, on the next listing of the same product where it has one (a new pair), else on
the same listing. Both picked by a hash of the row, so the same inputs give the same day 2.

Day 1 is `pairsieve build` into WORK/day1, day 2 `pairsieve build --previous WORK/day1` into
WORK/day2, each a child process in the same `PREFECT_HOME` (`harness.builds.run_build`).

    .venv/bin/python benchmarks/day_two.py --data DATA --cache CACHE --work /tmp/ps-day2 \
        [--changed 0.01] [--new-clicks 0.05] [--json FIGURES.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import polars as pl
from harness.builds import run_build
from harness.stages import stage_seconds

from pairsieve import schemas as S

_PICK = 10_000  # a row is picked when its hash modulo this falls under share * _PICK


def picked(column: str, share: float, seed: int) -> pl.Expr:
    return (pl.col(column).hash(seed=seed) % _PICK) < int(share * _PICK)


def day_two(data: Path, changed: float, new_clicks: float, folder: Path) -> dict[str, int]:
    """Write day 2's catalog and clicks into ``folder``; how many titles and clicks changed."""
    catalog = pl.read_parquet(data / "catalog.parquet")
    clicks = pl.read_parquet(data / "clicks.parquet")
    moved = pl.col(S.TITLE).str.splitn(" ", 2).struct
    reworded = pl.concat_str([moved.field("field_1"), moved.field("field_0")], separator=" ")
    retitle = picked(S.LISTING_ID, changed, 11) & pl.col(S.TITLE).str.contains(" ")
    day2_catalog = catalog.with_columns(
        pl.when(retitle).then(reworded).otherwise(pl.col(S.TITLE)).alias(S.TITLE)
    )
    following = catalog.sort(S.LISTING_ID).select(
        S.LISTING_ID,
        pl.col(S.LISTING_ID).shift(-1).over(S.TRUE_PRODUCT_ID).alias("_next"),
    )
    later = clicks["ts"].max() + datetime.timedelta(days=1)
    keyed = clicks.with_row_index("_row").with_columns(
        pl.concat_str(pl.col("_row").cast(pl.String), S.QUERY).alias("_key")
    )
    again = (
        keyed.filter(picked("_key", new_clicks, 13))
        .join(following, on=S.LISTING_ID)
        .with_columns(
            pl.coalesce("_next", S.LISTING_ID).alias(S.LISTING_ID),
            pl.concat_str(pl.lit("day2-"), "session_id").alias("session_id"),
            pl.lit(later).dt.cast_time_unit("us").dt.replace_time_zone("UTC").alias("ts"),
        )
        .select(clicks.columns)
    )
    folder.mkdir(parents=True, exist_ok=True)
    day2_catalog.write_parquet(folder / "catalog.parquet")
    pl.concat([clicks, again]).write_parquet(folder / "clicks.parquet")
    return {
        "listings": catalog.height,
        "titles_changed": int(catalog.select(retitle.sum()).item()),
        "click_rows": clicks.height,
        "click_rows_added": again.height,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--changed", type=float, default=0.01, help="share of titles reworded")
    parser.add_argument("--new-clicks", type=float, default=0.05, help="share of click rows added")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    figures: dict = {"day2_inputs": day_two(args.data, args.changed, args.new_clicks,
                                            args.work / "day2-data")}  # fmt: skip
    print(json.dumps(figures["day2_inputs"]), flush=True)
    env = {
        **os.environ,
        "PREFECT_HOME": str(args.work / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    cli = str(Path(sys.executable).parent / "pairsieve")
    days = {"day1": (args.data, []), "day2": (args.work / "day2-data", ["--previous"])}
    for day, (data, previous) in days.items():
        out = args.work / day
        command = [cli, "build", "--clicks", str(data / "clicks.parquet")]
        command += ["--catalog", str(data / "catalog.parquet"), "--out", str(out)]
        command += [*previous, *([str(args.work / "day1")] if previous else [])]
        command += ["--set", f"cache_dir={args.cache}"]
        figures[day] = {**run_build(command, env, [], out), "stage_s": stage_seconds(out)}
        print(day, json.dumps(figures[day]), flush=True)
    figures["day2_share"] = round(figures["day2"]["seconds"] / figures["day1"]["seconds"], 4)
    print("day 2 / day 1 wall:", figures["day2_share"])
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
