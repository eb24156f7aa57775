"""Fit the judgement of mined candidates (src/pairsieve/mine/copy_model.json) and measure it
leave-one-catalog-out, with the package's own fit (`pairsieve.mine.copy_model_fit`).

For each catalog, the model and `keep_below` from the other four, measured on it (how many
candidates it keeps, and the share of them that are copies), and written to
`--loo-dir/copy_model-without-NAME.json` for that catalog's experiment
(`--build-set mine.copy_model=...`). `--write` writes the model fitted on all of them as the
shipped one.

Usage: python benchmarks/fit_copy_model.py --work /tmp/ps-exp [--loo-dir DIR] [--write]
(the work folders are `benchmarks/experiment.py`'s, one default build a catalog)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pairsieve import schemas as S
from pairsieve.config import MineConfig
from pairsieve.mine import judgement
from pairsieve.mine.copy_model_fit import build_rows, fit, kept_share, leave_one_out

CATALOGS = ("pricerunner", "abt-buy", "walmart-amazon", "altosight", "alaska-cameras")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="experiment.py work folders")
    parser.add_argument("--loo-dir", type=Path, default=None)
    parser.add_argument("--write", action="store_true", help="write copy_model.json")
    args = parser.parse_args()
    cfg = MineConfig()
    parts = {}
    for name in CATALOGS:
        build = args.work / name / "build"
        if not (build / "mine" / S.NEGATIVES_FILE).exists():
            print(f"skipped {name}: no build under {build}")
            continue
        parts[name] = build_rows(build, cfg)
    print("| held out | density | judged | copies among them | keep_below (from the others) "
          "| kept | copies among kept | among kept first candidates |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name, model in leave_one_out(parts).items():
        frame, density = parts[name]
        kept, share, first = kept_share(model, frame, density, model.keep_below)
        print(f"| {name} | {density:.4f} | {frame.height:,} | {frame['copy'].mean():.4f} "
              f"| {model.keep_below} | {kept:,} | {share:.4f} | {first:.4f} |")  # fmt: skip
        if args.loo_dir is not None:
            args.loo_dir.mkdir(parents=True, exist_ok=True)
            path = args.loo_dir / f"copy_model-without-{name}.json"
            path.write_text(json.dumps(model.as_json(), indent=1) + "\n")
    model = fit(parts)
    print("\nall catalogs:", json.dumps(model.as_json()))
    if args.write:
        judgement.MODEL_FILE.write_text(json.dumps(model.as_json(), indent=1) + "\n")


if __name__ == "__main__":
    main()
