"""Leave-one-catalog-out: does a small cross-encoder, asked only where the pair model is unsure,
judge same-product pairs better on a catalog it never saw?

For each of the five benchmark catalogs the bundled MiniLM, with a one-logit head, is fine-tuned
as a cross-encoder (both titles in one input) on labelled candidate pairs of the other four:
pairs no attribute vetoes whose shipped pair-model probability lies in ``--band``, up to
``--per-catalog`` of them per catalog (drawn with a fixed seed), each catalog weighing the same.
On the held-out catalog the cross-encoder's probability replaces the pair model's inside the band;
clusters are made with the default thresholds and scored as ``transfer.py`` scores them
(cross-shop pairs for the two-shop catalogs). Printed beside today's default on the same
candidates: pairwise and B-cubed P/R/F1, the pairs asked, how well each model ranks the asked
pairs that have a label (ROC AUC) and the cost per pair.

Fine-tuned models and scores are kept under ``--work`` (a rerun reuses them).

Usage: python benchmarks/cross_encoder.py --data-root ../shared/data --work /tmp/ce
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from harness.clustering import Run, benchmark_run, held_out_splits, score_cells

from pairsieve import schemas as S
from pairsieve.cluster.judge import resolved_link_threshold
from pairsieve.config import PairsieveConfig
from pairsieve.datasets.benchmarks import BENCHMARKS
from pairsieve.pair_model import model as pair_model
from pairsieve.vectors.embed import bundled_model_path

SEED = 20
BATCH = 32


def titles(run: Run) -> tuple[list[str], list[str]]:
    """Both titles of every candidate pair, in ``run.scored`` order."""
    node_title = run.result.nodes[S.TITLE].to_list()
    return [node_title[i] for i in run.a.tolist()], [node_title[i] for i in run.b.tolist()]


def training_rows(run: Run, asked: np.ndarray, limit: int, seed: int) -> np.ndarray:
    """Up to ``limit`` labelled pair rows among ``asked``, drawn with ``seed``."""
    rows = np.flatnonzero(asked & run.labelled)
    if len(rows) > limit:
        rows = np.sort(np.random.default_rng(seed).choice(rows, limit, replace=False))
    return rows


def _tokens(tokenizer, pairs: list[tuple[str, str]], take: np.ndarray, max_length: int):
    """The model inputs of the pairs at rows ``take``: both titles in one sequence, padded to
    the batch's longest."""
    return tokenizer(
        [pairs[i][0] for i in take],
        [pairs[i][1] for i in take],
        truncation=True,
        max_length=max_length,
        padding=True,
        return_tensors="pt",
    )


def fine_tune(pairs: list[tuple[str, str]], y: np.ndarray, weight: np.ndarray, out: Path, args):
    """Fine-tune MiniLM with a one-logit head on ``pairs`` (weighted binary cross-entropy), one
    pass in a seeded order, and save it to ``out``."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(SEED)
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_path())
    model = AutoModelForSequenceClassification.from_pretrained(bundled_model_path(), num_labels=1)
    model.train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    steps = -(-len(pairs) // BATCH) * args.epochs
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min(1.0, (s + 1) / (0.1 * steps)) * max(0.0, 1 - s / steps)
    )
    loss_of = torch.nn.BCEWithLogitsLoss(reduction="none")
    started, step = time.perf_counter(), 0
    for epoch in range(args.epochs):
        order = np.random.default_rng(SEED + epoch).permutation(len(pairs))
        for start in range(0, len(order), BATCH):
            take = order[start : start + BATCH]
            batch = _tokens(tokenizer, pairs, take, args.max_length)
            logits = model(**batch).logits.squeeze(-1)
            target = torch.tensor(y[take], dtype=torch.float32)
            w = torch.tensor(weight[take], dtype=torch.float32)
            loss = (loss_of(logits, target) * w).sum() / w.sum()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            schedule.step()
            optimiser.zero_grad()
            step += 1
            if step % 100 == 0:
                rate = step * BATCH / (time.perf_counter() - started)
                print(
                    f"  step {step}/{steps} loss {loss.item():.3f} ({rate:.0f} pairs/s)", flush=True
                )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def predict(folder: Path, pairs: list[tuple[str, str]], max_length: int) -> np.ndarray:
    """(n,) probability per pair from the cross-encoder in ``folder`` (batches sorted by
    length, so padding stays short)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    order = np.argsort([len(a) + len(b) for a, b in pairs], kind="stable")
    out = np.empty(len(pairs), dtype=np.float64)
    with torch.inference_mode():
        for start in range(0, len(order), 256):
            take = order[start : start + 256]
            batch = _tokens(tokenizer, pairs, take, max_length)
            out[take] = torch.sigmoid(model(**batch).logits.squeeze(-1)).numpy()
    return out


def _auc(run: Run, rows: np.ndarray, *scores: np.ndarray) -> str:
    """ROC AUC of each of ``scores`` (over ``rows``) on the labelled rows, as table cells."""
    from sklearn.metrics import roc_auc_score

    labelled = run.labelled[rows]
    y = run.label[rows][labelled]
    return " | ".join(f"{roc_auc_score(y, score[labelled]):.3f}" for score in scores)


def main() -> None:  # noqa: PLR0915 - one measurement, start to end
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--band", type=float, nargs=2, default=(0.05, 0.95))
    parser.add_argument("--per-catalog", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--only", nargs="*", default=None, help="held-out catalogs to measure")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(2)
    cfg = PairsieveConfig()
    shipped = pair_model.load_model()
    link = resolved_link_threshold(cfg.cluster)
    runs, cheap, asked, texts = {}, {}, {}, {}
    for name, bench in BENCHMARKS.items():
        run = runs[name] = benchmark_run(cfg, bench, args.data_root)
        cheap[name] = shipped.probability(run.features)
        lo, hi = args.band
        asked[name] = ~run.vetoed & (cheap[name] >= lo) & (cheap[name] < hi)
        a, b = titles(run)
        texts[name] = list(zip(a, b, strict=True))
        print(
            f"{name}: {len(run.a):,} candidates, {int(asked[name].sum()):,} in the band", flush=True
        )
    args.work.mkdir(parents=True, exist_ok=True)
    print(
        "\n| catalog | asked pairs | default: pair P | pair R | pair F1 | B3 F1 "
        "| cross-encoder: pair P | pair R | pair F1 | B3 F1 | AUC: pair model | cross-encoder "
        "| ms per pair |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for fitted_on, held in held_out_splits(list(runs)):
        if args.only and held not in args.only:
            continue
        folder = args.work / f"without-{held}"
        if not (folder / "config.json").exists():
            pairs, ys, weights = [], [], []
            for name in fitted_on:
                rows = training_rows(runs[name], asked[name], args.per_catalog, SEED)
                pairs += [texts[name][i] for i in rows]
                ys.append(runs[name].label[rows].astype(np.float64))
                weights.append(np.full(len(rows), 1.0 / max(len(rows), 1)))
            weight = np.concatenate(weights)
            print(f"fine-tuning without {held}: {len(pairs):,} pairs", flush=True)
            fine_tune(pairs, np.concatenate(ys), weight * len(weight) / weight.sum(), folder, args)
        scores_file = args.work / f"scores-{held}.npz"
        rows = np.flatnonzero(asked[held])
        if not scores_file.exists():
            started = time.perf_counter()
            judged = predict(folder, [texts[held][i] for i in rows], args.max_length)
            per_pair_ms = 1000 * (time.perf_counter() - started) / max(len(rows), 1)
            np.savez(scores_file, judged=judged, per_pair_ms=per_pair_ms)
        kept = np.load(scores_file)
        judged, per_pair_ms = kept["judged"], float(kept["per_pair_ms"])
        p = cheap[held].copy()
        p[rows] = judged
        run = runs[held]
        today = run.scores(cheap[held], cfg.cluster.accept_probability, link)
        measured = run.scores(p, cfg.cluster.accept_probability, link)
        auc = _auc(run, rows, cheap[held][rows], judged)
        print(
            f"| {held} | {len(rows):,} | {score_cells(today)} | {score_cells(measured)} | {auc} "
            f"| {per_pair_ms:.2f} |",
            flush=True,
        )
        summary[held] = {"default": today.pairwise_f1, "cross_encoder": measured.pairwise_f1}
    (args.work / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
