"""`pairsieve experiment`: train the same encoder under each arm and measure it on held-out queries.

Each (arm, τ, seed) run trains a fresh copy of the base encoder for the same number of steps at
the same batch size and writes its per-query scores to `EXP/runs/`, named by a hash of
everything that decides them; a rerun with the same settings reuses them, so a long table can
be filled over several sessions. `results.json` and `report.html` are then computed from
those files: mean metrics per arm and τ, and paired bootstrap differences between arms.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl

from pairsieve.config import PairsieveConfig, load_config
from pairsieve.core import io
from pairsieve.core.hashing import text_key
from pairsieve.core.layout import RunLayout
from pairsieve.experiment import arms as A
from pairsieve.experiment import retrieval
from pairsieve.experiment.data import ExperimentData, load
from pairsieve.experiment.settings import Settings
from pairsieve.experiment.summary import summarise
from pairsieve.orchestration.stages import settings_hash

log = logging.getLogger(__name__)

RESULTS_FILE = "results.json"
LEARNED_SCALE_PATTERN = r"learned_scale\.log_scale$"  # the masked losses' learned 1 / τ


def load_model(settings: Settings):
    """A fresh copy of the base encoder (a SentenceTransformer), offline."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(settings.base_model, device="cpu")
    model.max_seq_length = settings.max_seq_length
    return model


def _fingerprint(run_dir: Path) -> str:
    """What identifies the build's rows: the sha256 of each shard file and of the inputs, as its
    manifest lists them. Not the config: a knob added or changed that moves no row must not
    make every kept run stale."""
    manifest = json.loads(RunLayout(run_dir).manifest.read_text())
    rows = {key: manifest[key] for key in ("files", "input_fingerprints")}
    return f"{text_key(json.dumps(rows, sort_keys=True)):016x}"


def _temperature_trace(loss: Any):
    """A trainer callback recording `loss`'s learned τ after every optimizer step."""
    from transformers import TrainerCallback

    class TemperatureTrace(TrainerCallback):
        def __init__(self, loss: Any) -> None:
            self.loss = loss
            self.values: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            if getattr(self.loss, "learned_scale", None) is not None:
                self.values.append(round(self.loss.temperature, 5))

    return TemperatureTrace(loss)


def train(model, recipe: A.Recipe, settings: Settings, seed: int) -> dict[str, Any]:
    """Train `model` in place on one arm's recipe; the τ trace, rows, loss and seconds."""
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    trace = _temperature_trace(recipe.loss)
    learned = getattr(recipe.loss, "learned_scale", None) is not None
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        args = SentenceTransformerTrainingArguments(
            output_dir=scratch,
            max_steps=settings.steps,
            per_device_train_batch_size=settings.batch_size,
            learning_rate=settings.learning_rate,
            warmup_steps=settings.warmup_ratio,  # below 1: a share of the steps
            batch_sampler=recipe.batch_sampler,
            learning_rate_mapping={LEARNED_SCALE_PATTERN: settings.tau_learning_rate}
            if learned
            else None,
            seed=seed,
            data_seed=seed,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            logging_strategy="no",
            dataloader_drop_last=True,
            dataloader_pin_memory=False,
        )
        trainer = SentenceTransformerTrainer(
            model=model,
            args=args,
            train_dataset=recipe.dataset,
            loss=recipe.loss,
            callbacks=[trace],
        )
        output = trainer.train()
    return {
        "rows": len(recipe.dataset),
        "steps": output.global_step,
        "train_loss": round(float(output.training_loss), 5),
        "train_s": round(time.perf_counter() - started, 1),
        "tau_trace": trace.values,
    }


def _mined(data: ExperimentData, context: dict[str, Any], out: Path) -> dict:
    """sentence-transformers' mined rows for the arms that use them (and the naive rows cleaned
    for `cleaned`), cached under `out`."""
    settings: Settings = context["settings"]
    fingerprint = context["fingerprint"]
    wanted = set(settings.arms) | ({"naive"} if A.CLEANED in settings.arms else set())
    mined = {}
    for arm, margin in A.MINED_ARMS.items():
        if arm not in wanted:
            continue
        path = out / f"mined-{arm}-k{settings.negatives}-{fingerprint[:8]}.parquet"
        if not path.exists():
            frame = A.mine_with_sentence_transformers(
                data, context["base"], settings.negatives, margin, out / "st-cache"
            )
            io.write_parquet(frame, path)
        mined[arm] = pl.read_parquet(path)
    if A.CLEANED in settings.arms:
        folder = out / f"cleaned-k{settings.negatives}-{fingerprint[:8]}-{context['clean_hash']}"
        mined[A.CLEANED] = A.clean_mined(mined["naive"], data, context["clean_config"], folder)
    return mined


def _one_run(context: dict[str, Any], arm: str, tau: float | str | None, seed: int | None):
    """Scores (and training facts) of one (arm, τ, seed), from `EXP/runs/` when already there."""
    settings: Settings = context["settings"]
    fingerprint = context["fingerprint"]
    if arm == A.CLEANED:  # its rows depend on the clean's settings too
        fingerprint += context["clean_hash"]
    key = settings.run_key(arm, tau, seed, fingerprint)
    scores_path = context["runs"] / f"{key}.parquet"
    info_path = context["runs"] / f"{key}.json"
    if scores_path.exists() and info_path.exists():
        return pl.read_parquet(scores_path), json.loads(info_path.read_text())
    started = time.perf_counter()
    if arm == "zero-shot":
        model, info = context["base"], {}
    else:
        model = load_model(settings)
        rows = A.TrainingRows(context["data"], context["mined"])
        recipe = A.recipe(arm, tau, model, context["base"], rows, settings)
        info = train(model, recipe, settings, seed)
    scores = retrieval.evaluate(model, context["data"])
    info.update(
        {"arm": arm, "tau": tau, "seed": seed, "seconds": round(time.perf_counter() - started, 1)}
    )
    log.info(
        "%s τ=%s seed=%s: recall@10 %.4f (%.0f s)",
        arm,
        tau,
        seed,
        scores["recall@10"].mean(),
        info["seconds"],
    )
    io.write_parquet(scores, scores_path)
    io.write_json(info, info_path)
    return scores, info


def run(
    run_dir: Path, out: Path, settings: Settings, clean_config: PairsieveConfig | None = None
) -> dict[str, Any]:
    """Train and measure every arm, τ and seed of `settings` on the build in `run_dir`; write
    `out/results.json`, `out/per_query.parquet` and `out/report.html`; return the results.
    ``clean_config`` is the config the `cleaned` arm's clean runs with (default: the defaults)."""
    from pairsieve.experiment.page import write_page

    data = load(run_dir, settings.truth_column)
    fingerprint = _fingerprint(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs").mkdir(exist_ok=True)
    base = load_model(settings)
    clean_config = clean_config or load_config(None)
    context: dict[str, Any] = {
        "settings": settings,
        "data": data,
        "base": base,
        "fingerprint": fingerprint,
        "runs": out / "runs",
        "clean_config": clean_config,
        "clean_hash": settings_hash(clean_config, "clean")[:8],
    }
    context["mined"] = _mined(data, context, out)
    runs = {}
    if "zero-shot" in settings.arms:
        runs[("zero-shot", None, None)] = _one_run(context, "zero-shot", None, None)
    # Seed by seed, so a stopped experiment has whole seeds of every arm to compare.
    for seed in settings.seeds:
        for tau in settings.taus:
            for arm in (a for a in settings.arms if a != "zero-shot" and A.supports(a, tau)):
                runs[(arm, tau, seed)] = _one_run(context, arm, tau, seed)
    results = summarise(runs, settings, data, context["mined"])
    per_query = pl.concat(
        [
            scores.with_columns(
                pl.lit(arm).alias("arm"),
                pl.lit(str(tau)).alias("tau"),
                pl.lit(seed, dtype=pl.Int64).alias("seed"),
            )
            for (arm, tau, seed), (scores, _) in sorted(runs.items(), key=str)
        ]
    )
    io.write_parquet(per_query, out / "per_query.parquet")
    io.write_json(results, out / RESULTS_FILE)
    write_page(results, out / "report.html")
    return results
