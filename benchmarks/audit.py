"""False negatives in sentence-transformers' `mine_hard_negatives` output vs pairsieve's shards.

One click log is derived from PriceRunner (`datasets.clicklog.derive_clicks` over
`datasets.pricerunner.load_catalog`). Two training sets are made from it:

* sentence-transformers 6.2 `mine_hard_negatives` over the (query, clicked title) pairs with the
  whole catalog as corpus, the bundled MiniLM, n-tuple output (a product-blind miner: it only
  skips the positive's own text);
* pairsieve's build (ingest → cluster → mine → shards) of the same clicks and catalog.

sentence-transformers would embed the 41k texts itself at ~7 texts/s on this shared 2-core machine
(over an hour), so its own ``cache_folder`` mechanism is fed instead: the same bundled MiniLM's
vectors from pairsieve's embedding cache (max_seq_length 64, unit norm) are saved under the file
names `mine_hard_negatives` computes for its de-duplicated queries and corpus. The mining itself
(retrieval, positive skipping, top-k selection) is sentence-transformers' code, unchanged.

Both are then audited by `pairsieve.audits.stage.run` (what
`pairsieve audit --dataset … --catalog …` runs) with the same catalog, so both rates use the
same product clustering; the script also counts false negatives against PriceRunner's
ground-truth product ids as a cross-check.

    .venv/bin/python benchmarks/audit.py [--data /work/shared/data] [--work /tmp/ps-audit-bench]

Prints a markdown block for benchmarks/RESULTS.md. Target: pairsieve's rate <= 1/5 of ST's.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import polars as pl
from harness.audit_data import NUM_NEGATIVES, st_dataset

from pairsieve import schemas as S
from pairsieve.audits import stage as audit
from pairsieve.audits.dataset import read_dataset
from pairsieve.config import PairsieveConfig
from pairsieve.datasets import clicklog, pricerunner
from pairsieve.orchestration import steps
from pairsieve.report import stage as report
from pairsieve.vectors.embed import load_encoder


def prepare_inputs(data: Path, work: Path, seed: int) -> tuple[Path, Path]:
    catalog = pricerunner.load_catalog(data)
    clicks = clicklog.derive_clicks(catalog, seed=seed)
    work.mkdir(parents=True, exist_ok=True)
    catalog.write_parquet(work / "catalog.parquet")
    clicks.write_parquet(work / "clicks.parquet")
    return work / "catalog.parquet", work / "clicks.parquet"


def pairsieve_build(cfg: PairsieveConfig, catalog: Path, clicks: Path, run_dir: Path) -> dict:
    timings = {}
    for name, step in (
        ("ingest", lambda: steps.ingest_step(cfg, [str(clicks)], [str(catalog)], run_dir)),
        ("cluster", lambda: steps.cluster_step(cfg, run_dir)),
        ("mine", lambda: steps.mine_step(cfg, run_dir)),
        ("shards", lambda: steps.shards_step(cfg, run_dir)),
        ("report", lambda: steps.report_step(cfg, run_dir)),
    ):
        started = time.perf_counter()
        result = step()
        timings[name] = round(time.perf_counter() - started, 1)
        logging.info("%s", result.summary())
    return timings


def truth_rate(dataset: Path, catalog: Path) -> float:
    """Share of negatives whose ground-truth product is the positive's (titles -> truth ids)."""
    data, _ = read_dataset(dataset)
    truth = (
        pl.read_parquet(catalog)
        .sort(S.LISTING_ID)
        .unique(S.TITLE, keep="first")
        .select(S.TITLE, S.TRUE_PRODUCT_ID)
    )
    lookup = dict(zip(truth[S.TITLE].to_list(), truth[S.TRUE_PRODUCT_ID].to_list(), strict=True))
    hits = total = 0
    for positive, negatives in zip(
        data[S.POSITIVE].to_list(), data[audit.NEGATIVES].to_list(), strict=True
    ):
        p = lookup.get(positive)
        total += len(negatives)
        hits += sum(p is not None and lookup.get(n) == p for n in negatives)
    return hits / total if total else 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/ps-audit-bench"))
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cfg = PairsieveConfig().with_(
        **{
            "seed": args.seed,
            "ingest.truth_column": S.TRUE_PRODUCT_ID,
            "mine.num_negatives": NUM_NEGATIVES,
        }
    )
    catalog, clicks = prepare_inputs(args.data, args.work, args.seed)
    build_s = pairsieve_build(cfg, catalog, clicks, args.work / "build")
    st_path, st_s = st_dataset(catalog, clicks, args.work / "st_mined.parquet")
    encoder = load_encoder(cfg.embed)
    results = {}
    for name, dataset in (
        ("sentence-transformers", st_path),
        ("pairsieve shards", args.work / "build" / "shards"),
    ):
        started = time.perf_counter()
        out = args.work / f"audit-{name.split()[0]}"
        result = audit.run(cfg, audit.Inputs(dataset, catalog), out, encoder=encoder)
        rep = report.load_report(out)
        results[name] = {
            "rows": result.rows_out,
            "false_negative_rate": rep["false_negative_rate"],
            "exact_copy_rate": rep["audit"]["figures"]["exact_copy_rate"],
            "truth_false_negative_rate": truth_rate(dataset, catalog),
            "audit_s": round(time.perf_counter() - started, 1),
        }
    st_rate = results["sentence-transformers"]["false_negative_rate"]
    ps_rate = results["pairsieve shards"]["false_negative_rate"]
    summary = {
        "results": results,
        "ratio_pairsieve_to_st": ps_rate / st_rate if st_rate else None,
        "target_met": ps_rate <= st_rate / 5,
        "build_s": build_s,
        "st_mine_s": round(st_s, 1),
    }
    (args.work / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
