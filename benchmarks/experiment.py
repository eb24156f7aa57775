"""What the hygiene does to a trained model, through the front door: derive a click log from a
labelled catalog, `pairsieve build` it with a held-out split, then `pairsieve experiment` it.

    .venv/bin/python benchmarks/experiment.py --catalog pricerunner --work /tmp/ps-exp \
        [--data-root ../shared/data] [--copy-share 0.25] [--build-set KEY=VALUE] \
        -- --seeds 3 --taus 0.05

`--catalog` is a benchmark name (`pairsieve.datasets.benchmarks`) or `synth:N` for a generated
marketplace of N products; `--copy-share` thins the catalog first (`datasets.thinning`), the
dose-response axis; `--build-set` passes a setting to the build (an ablation of the hygiene,
kept in an archive of its own). Everything after `--` goes to `pairsieve experiment`. The build
and the experiment both resume: a rerun with more seeds or temperatures trains only new runs.

A table takes hours of machine time, more than one sitting, and a scratch folder does not
outlive its machine. So each run is also kept in the repo under `benchmarks/experiment_runs/NAME/`
(a few kB: its facts, and its per-query scores keyed by a hash of the query text) and put back
before the next sitting's experiment. A run's file name hashes the settings and the sha256s of
the build's shards and inputs, so a kept run is only reused by a build with the same rows and
the same settings; any other is trained afresh.
Prints the arm table and the paired differences as markdown for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
from harness.runs import QUERY_KEY

from pairsieve import schemas as S
from pairsieve.core import io
from pairsieve.core.hashing import column_keys, text_keys
from pairsieve.datasets import clicklog, synth
from pairsieve.datasets.benchmarks import benchmark
from pairsieve.datasets.thinning import copy_share, thin_to_copy_share
from pairsieve.experiment.data import load

BIN = Path(sys.executable).parent


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalog", required=True, help="benchmark name or synth:N")
    parser.add_argument("--work", type=Path, required=True, help="scratch folder (resumable)")
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--copy-share", type=float, default=None, help="thin to this share")
    parser.add_argument("--seed", type=int, default=0, help="click log and thinning seed")
    parser.add_argument("--eval-fraction", type=float, default=0.2, help="products held out")
    parser.add_argument(
        "--build-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a build setting (`pairsieve build --set`), e.g. mine.relative_margin=none",
    )
    parser.add_argument(
        "--archive", type=Path, default=None, help="kept runs [benchmarks/experiment_runs/NAME]"
    )
    return parser.parse_args(argv[:split]), argv[split + 1 :]


def catalog_of(args: argparse.Namespace) -> pl.DataFrame:
    if args.catalog.startswith("synth:"):
        folder = args.work / "synth"
        if not (folder / "catalog.parquet").exists():
            synth.generate(folder, int(args.catalog.split(":")[1]), seed=args.seed)
        catalog = pl.read_parquet(folder / "catalog.parquet")
    else:
        catalog = benchmark(args.catalog).load(args.data_root)
    if args.copy_share is not None:
        catalog = thin_to_copy_share(catalog, args.copy_share, seed=args.seed)
    return catalog


def inputs(args: argparse.Namespace) -> tuple[Path, Path]:
    """The catalog and its derived click log as parquet under `--work` (made once)."""
    folder = args.work / "inputs"
    catalog_path, clicks_path = folder / "catalog.parquet", folder / "clicks.parquet"
    if not clicks_path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        catalog = catalog_of(args)
        catalog.write_parquet(catalog_path)
        clicklog.derive_clicks(catalog, seed=args.seed).write_parquet(clicks_path)
    return catalog_path, clicks_path


def archive_of(args: argparse.Namespace) -> Path:
    """Where this catalog's runs are kept between sittings."""
    if args.archive is not None:
        return args.archive
    name = args.catalog.replace(":", "-")
    if args.copy_share is not None:
        name += f"-share{args.copy_share:g}"
    for setting in sorted(args.build_set):
        name += "-" + setting.replace('"', "")
    return Path(__file__).parent / "experiment_runs" / name


def keep_runs(out: Path, archive: Path) -> None:
    """Keep `out`'s new runs in `archive`: each run's facts as they are, and its scores with the
    query texts replaced by their keys (the repo holds no text of a benchmark catalog)."""
    for info in sorted((out / "runs").glob("*.json")):
        scores = info.with_suffix(".parquet")
        if (archive / info.name).exists() or not scores.exists():
            continue
        archive.mkdir(parents=True, exist_ok=True)
        frame = pl.read_parquet(scores)
        keyed = frame.select(column_keys(frame[S.QUERY]).alias(QUERY_KEY), pl.exclude(S.QUERY))
        io.write_parquet(keyed, archive / scores.name)
        shutil.copyfile(info, archive / info.name)


def restore_runs(archive: Path, out: Path, queries: list[str]) -> None:
    """Put the kept runs back into `out/runs`, their query texts recovered from the build's own
    held-out `queries`; a run with a key no query has stays out and is trained afresh."""
    text_of = dict(zip(text_keys(queries).tolist(), queries, strict=True))
    for info in sorted(archive.glob("*.json")):
        target = out / "runs" / info.name
        frame = pl.read_parquet(info.with_suffix(".parquet"))
        keys = frame[QUERY_KEY].to_list()
        if target.exists() or not all(k in text_of for k in keys):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        texts = pl.Series(S.QUERY, [text_of[k] for k in keys], dtype=pl.String)
        io.write_parquet(frame.select(texts, pl.exclude(QUERY_KEY)), target.with_suffix(".parquet"))
        shutil.copyfile(info, target)  # last: a run counts once both of its files are there


def run(command: list[str]) -> None:
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def markdown(results: dict, catalog: pl.DataFrame) -> str:
    settings = results["settings"]
    lines = [
        f"{catalog.height:,} listings, copy share {copy_share(catalog):.3f}; "
        f"{results['queries']:,} held-out queries, {results['train_rows']:,} train rows; "
        f"{settings['steps']} steps, batch {settings['batch_size']}, "
        f"{settings['negatives']} negative(s), max_seq_length {settings['max_seq_length']}.",
        f"Training negatives of the positive's own product: "
        f"{results['negatives_of_the_positive_product']}",
        "",
        "| arm | τ | seeds | recall@10 | nDCG@10 | MRR@10 |",
        "|---|---|---|---|---|---|",
    ]
    for row in results["arms"]:
        lines.append(
            f"| {row['arm']} | {row['tau'] or '–'} | {row['seeds']} | {row['recall@10']:.4f} "
            f"| {row['ndcg@10']:.4f} | {row['mrr@10']:.4f} |"
        )
    lines += ["", "| arm − baseline | τ | metric | difference | 95% paired interval |"]
    lines.append("|---|---|---|---|---|")
    for c in results["comparisons"]:
        lo, hi = c["ci"]
        lines.append(
            f"| {c['arm']} − {c['baseline']} | {c['tau']} | {c['metric']} "
            f"| {c['difference']:+.4f} | {lo:+.4f} to {hi:+.4f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args, experiment_args = parse_args(argv)
    catalog_path, clicks_path = inputs(args)
    build, out = args.work / "build", args.work / "experiment"
    if not (build / "shards" / S.MANIFEST_FILE).exists():
        run([
            str(BIN / "pairsieve"), "build", "--clicks", str(clicks_path),
            "--catalog", str(catalog_path), "--out", str(build),
            "--set", f"shards.eval_fraction={args.eval_fraction}",
            "--set", f'ingest.truth_column="{S.TRUE_PRODUCT_ID}"',
            *(part for setting in args.build_set for part in ("--set", setting)),
        ])  # fmt: skip
    archive = archive_of(args)
    held_out = load(build, S.TRUE_PRODUCT_ID).queries[S.QUERY].unique().to_list()
    restore_runs(archive, out, held_out)
    try:
        run([
            str(BIN / "pairsieve"), "experiment", "--run", str(build), "--out", str(out),
            "--truth-column", S.TRUE_PRODUCT_ID, *experiment_args,
        ])  # fmt: skip
    finally:
        keep_runs(out, archive)
    results = json.loads((out / "results.json").read_text())
    print(markdown(results, pl.read_parquet(catalog_path)))


if __name__ == "__main__":
    main()
