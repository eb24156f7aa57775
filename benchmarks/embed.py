"""Embedding throughput: stock `SentenceTransformer.encode` against every pairsieve backend.

One run, the same seeded sample of real PriceRunner titles for every variant:

1. throughput and quality: all variants are loaded in this process and the titles are fed in
   chunks, each chunk to every variant in rotated order, so load from other processes on the
   shared CPU hits every variant alike; titles/s is over the summed encode time of each variant,
   mean/min cosine is against the stock fp32 torch vectors (max_seq_length 256, no truncation);
2. peak RSS: each variant in its own child process encoding ``--rss-titles`` titles;
3. token lengths of all PriceRunner titles and of the queries of its derived click log, which
   set `EmbedConfig.max_seq_length`.

    .venv/bin/python benchmarks/embed.py --titles 20000 > /tmp/embed-bench.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pairsieve.config import EmbedConfig  # noqa: E402
from pairsieve.vectors.embed import bundled_model_path, load_encoder  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "pricerunner"
CSV = DATA / "pricerunner_aggregate.csv"
# name -> EmbedConfig overrides; "stock" is plain SentenceTransformer(...).encode with its defaults
VARIANTS: dict[str, dict] = {
    "stock": {},
    "torch": {"backend": "torch"},
    "onnx": {"backend": "onnx"},
    "onnx-optimized": {"backend": "onnx-optimized"},
    "onnx-int8": {"backend": "onnx-int8"},
    "onnx-int8 seq 32": {"backend": "onnx-int8", "max_seq_length": 32},
}


class StockEncoder:
    """What a user gets without pairsieve: default batch size 32 and max_seq_length 256."""

    def __init__(self) -> None:
        from sentence_transformers import SentenceTransformer

        self._model = SentenceTransformer(bundled_model_path(), device="cpu")

    def encode(self, texts: list[str]) -> np.ndarray:
        return self._model.encode(texts, normalize_embeddings=True, show_progress_bar=False)


def load_variant(name: str, cache_dir: str):
    if name == "stock":
        return StockEncoder()
    return load_encoder(EmbedConfig(**VARIANTS[name]), cache_dir)


def sample_titles(n: int, seed: int) -> list[str]:
    titles = pl.read_csv(CSV)["product_title"].cast(pl.String).to_list()
    rng = np.random.default_rng(seed)
    return [titles[i] for i in np.sort(rng.choice(len(titles), min(n, len(titles)), replace=False))]


def throughput(names: list[str], titles: list[str], cache_dir: str, chunk: int) -> dict:
    """Interleaved encode of ``titles`` by every variant: seconds, vectors, load time."""
    encoders, load_s = {}, {}
    for name in names:
        started = time.perf_counter()
        encoders[name] = load_variant(name, cache_dir)
        encoders[name].encode(titles[:32])  # warm-up: first-call allocations, lazy init
        load_s[name] = time.perf_counter() - started
    seconds = dict.fromkeys(names, 0.0)
    vectors: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for round_no, start in enumerate(range(0, len(titles), chunk)):
        batch = titles[start : start + chunk]
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter()
            vectors[name].append(np.asarray(encoders[name].encode(batch), dtype=np.float32))
            seconds[name] += time.perf_counter() - started
        print(f"chunk {round_no}: {seconds}", file=sys.stderr, flush=True)
    return {
        "seconds": seconds,
        "load_seconds": load_s,
        "vectors": {name: np.concatenate(parts) for name, parts in vectors.items()},
    }


def peak_rss(name: str, n: int, seed: int, cache_dir: str) -> float:
    """Peak RSS (MiB) of a fresh process that loads ``name`` and encodes ``n`` titles."""
    out = subprocess.run(
        [sys.executable, __file__, "--rss-child", name, "--titles", str(n), "--seed", str(seed),
         "--cache-dir", cache_dir],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mib"]


def token_lengths() -> dict:
    """Word-piece counts (with [CLS]/[SEP]) of every PriceRunner title and derived query."""
    from tokenizers import Tokenizer

    from pairsieve.datasets.clicklog import derive_clicks
    from pairsieve.datasets.pricerunner import load_catalog

    tokenizer = Tokenizer.from_file(str(Path(bundled_model_path()) / "tokenizer.json"))
    tokenizer.no_padding()  # the file pads to a fixed 128
    tokenizer.no_truncation()
    catalog = load_catalog(DATA.parent)
    titles = pl.read_csv(CSV)["product_title"].cast(pl.String).unique().to_list()
    queries = derive_clicks(catalog, seed=13)["query"].unique().to_list()
    table = {}
    for label, texts in (("PriceRunner titles", titles), ("derived queries", queries)):
        lengths = np.array([len(e.ids) for e in tokenizer.encode_batch(texts)])
        table[label] = {
            "n": len(texts),
            **{f"p{q}": float(np.percentile(lengths, q)) for q in (50, 90, 99, 99.9)},
            "max": int(lengths.max()),
            **{f"> {k}": round(float((lengths > k).mean()) * 100, 3) for k in (32, 48, 64, 128)},
        }
    return table


def markdown(args: argparse.Namespace, result: dict, rss: dict, distinct: int) -> str:
    seconds, vectors = result["seconds"], result["vectors"]
    ref = vectors["stock"]
    stock_rate = len(ref) / seconds["stock"]
    lines = [
        f"Titles: {len(ref)} sampled PriceRunner titles (seed {args.seed}, {distinct} distinct), "
        f"fed in chunks of {args.chunk} to every variant in rotated order.",
        "",
        "| variant | titles/s | x stock | load s | peak RSS MiB | mean cos | min cos |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in seconds:
        rate = len(ref) / seconds[name]
        cos = (vectors[name] * ref).sum(1)
        lines.append(
            f"| {name} | {rate:.0f} | {rate / stock_rate:.2f} | {result['load_seconds'][name]:.1f}"
            f" | {rss.get(name, float('nan')):.0f} | {cos.mean():.4f} | {cos.min():.4f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--titles", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--chunk", type=int, default=1000)
    parser.add_argument("--rss-titles", type=int, default=2000)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--cache-dir", default=str(Path("~/.cache/pairsieve").expanduser()))
    parser.add_argument("--no-token-lengths", action="store_true")
    parser.add_argument("--rss-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    titles = sample_titles(args.titles, args.seed)
    if args.rss_child:
        load_variant(args.rss_child, args.cache_dir).encode(titles)
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent across exec
        status = Path("/proc/self/status").read_text().splitlines()
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024
        print(json.dumps({"peak_rss_mib": peak}))
        return
    names = args.variants.split(",")
    for name in names:  # export the ONNX files before any timing
        if name != "stock":
            load_variant(name, args.cache_dir)
    result = throughput(names, titles, args.cache_dir, args.chunk)
    rss = {name: peak_rss(name, args.rss_titles, args.seed, args.cache_dir) for name in names}
    print(markdown(args, result, rss, len(set(titles))))
    if args.no_token_lengths:
        return
    print("\nToken lengths (word pieces incl. [CLS]/[SEP]; '> k' = % of texts truncated at k):\n")
    print(f"```\n{json.dumps(token_lengths(), indent=1)}\n```")


if __name__ == "__main__":
    main()
