"""Does a catalog-adapted encoder give better product ids? The bundled MiniLM fine-tuned on the
catalog's own titles, self-supervised, then the catalog clustered with it (truth hidden).

Two augmented views of one title are a positive pair and the other titles of the batch its
negatives (InfoNCE, τ 0.05): a view drops words, moves a span of words, changes the case, or
cuts a long word to its first letters, the ways two sellers word one product. Nothing reads the
truth, so every catalog is held out by construction; the recipe (steps, rate, views) is fixed
before any catalog is measured. The clustering then runs with the adapted weights as
`embed.model_path` (exported to ONNX int8 like the bundled ones) and the shipped pair model and
thresholds, and is scored as `candidate_recall.py` scores it (`harness.clustering.recall_row`).

    cd benchmarks && ../.venv/bin/python adapted_encoder.py --data-root ../../shared/data \
        [--catalogs abt-buy,altosight] [--steps 100] [--work /tmp/adapted]
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch
from harness.clustering import recall_row

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.datasets.benchmarks import BENCHMARKS
from pairsieve.vectors.embed import bundled_model_path

BATCH = 64
SCALE = 20.0  # τ 0.05
LEARNING_RATE = 3e-5
MAX_TITLES = 20_000  # titles the views are drawn from


def view(title: str, rng: random.Random) -> str:
    """One augmented view of ``title``: words dropped, a span moved, case changed, or a long word
    cut short; each with its own chance, so a view may carry several."""
    words = title.split()
    if len(words) > 2 and rng.random() < 0.5:
        kept = [w for w in words if rng.random() > 0.15]
        words = kept or words[:1]
    if len(words) > 3 and rng.random() < 0.3:
        start = rng.randrange(len(words) - 1)
        span = words[start : start + rng.randint(1, 3)]
        rest = words[:start] + words[start + len(span) :]
        at = rng.randrange(len(rest) + 1)
        words = rest[:at] + span + rest[at:]
    if rng.random() < 0.2:
        words = [w[:4] if len(w) > 7 and w.isalpha() and rng.random() < 0.5 else w for w in words]
    text = " ".join(words)
    case = rng.random()
    return text.lower() if case < 0.2 else text.upper() if case < 0.3 else text


def adapt(titles: list[str], steps: int, seed: int, out: Path) -> float:
    """Fine-tunes the bundled encoder on views of ``titles`` for ``steps`` batches; saves it to
    ``out``; returns the seconds taken."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    started = time.perf_counter()
    rng = random.Random(seed)
    torch.manual_seed(seed)
    model = SentenceTransformer(bundled_model_path(), device="cpu")
    model.max_seq_length = 64
    loss = MultipleNegativesRankingLoss(model, scale=SCALE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    model.train()
    for _ in range(steps):
        batch = rng.sample(titles, min(BATCH, len(titles)))
        features = [model.preprocess([view(t, rng) for t in batch]) for _ in range(2)]
        optimizer.zero_grad()
        loss(features, None).backward()
        optimizer.step()
    model.eval()
    model.save(str(out))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--catalogs", default=",".join(BENCHMARKS))
    parser.add_argument("--steps", type=int, default=100)  # the recipe RESULTS records
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/adapted"))
    args = parser.parse_args()
    print("| catalog | adapt s | P | R | F1 | true node pairs | candidate recall "
          "| held by low_information | pairs judged | cluster s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.catalogs.split(","):
        catalog = BENCHMARKS[name].load(args.data_root)
        titles = sorted(set(catalog[S.TITLE].drop_nulls().to_list()))
        titles = random.Random(args.seed).sample(titles, min(MAX_TITLES, len(titles)))
        out = args.work / name
        seconds = adapt(titles, args.steps, args.seed, out)
        cfg = PairsieveConfig().with_(**{"embed.model_path": str(out)})
        row = recall_row(cfg, name, args.data_root)
        cells = [name, f"{seconds:.0f}", *(str(v) for k, v in row.items() if k != "catalog")]
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
