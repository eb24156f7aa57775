"""`pairsieve experiment`: what the hygiene does to a trained model, arm by arm."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from pairsieve.cli.app import (
    ConfigOpt,
    OutOpt,
    SetOpt,
    app,
    config_from_cli,
    handle_errors,
    print_json,
)
from pairsieve.errors import PairsieveError


def _floats_or_learned(text: str) -> tuple[float | str, ...]:
    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            values.append(part if part == "learned" else float(part))
        except ValueError:
            raise PairsieveError(
                "bad_option", f"--taus takes numbers or 'learned', got {part!r}"
            ) from None
    return tuple(values)


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


TruthOpt = Annotated[
    str | None, typer.Option("--truth-column", help="Ground-truth product column.")
]
ArmsOpt = Annotated[
    str | None,
    typer.Option(
        "--arms",
        help="Comma-separated arms [all but those run on request; see README].",
    ),
]
TausOpt = Annotated[str, typer.Option("--taus", help="Temperatures, e.g. 0.1,0.05,learned.")]
SeedsOpt = Annotated[int, typer.Option("--seeds", min=1, help="Seeds per arm and τ.")]
StepsOpt = Annotated[int, typer.Option("--steps", min=1, help="Optimizer steps per run.")]
BatchOpt = Annotated[int, typer.Option("--batch-size", min=2, help="Rows per batch.")]
NegativesOpt = Annotated[int, typer.Option("--negatives", min=1, help="Hard negatives per row.")]
SeqOpt = Annotated[int, typer.Option("--max-seq-length", min=8, help="Token limit per text.")]
MiniBatchOpt = Annotated[
    int | None,
    typer.Option(
        "--mini-batch-size",
        min=1,
        help="Train each arm's loss by gradient caching, this many rows embedded at once.",
    ),
]
TauRateOpt = Annotated[
    float | None,
    typer.Option("--tau-learning-rate", min=0.0, help="Learning rate of a learned τ [0.05]."),
]


@app.command("experiment")
@handle_errors
def experiment_command(  # noqa: PLR0913 - one parameter per CLI option
    run: Annotated[Path, typer.Option("--run", help="A finished build with an eval split.")],
    out: OutOpt,
    truth_column: TruthOpt = None,
    arms: ArmsOpt = None,
    taus: TausOpt = "0.05",
    seeds: SeedsOpt = 1,
    steps: StepsOpt = 100,
    batch_size: BatchOpt = 64,
    negatives: NegativesOpt = 1,
    max_seq_length: SeqOpt = 32,
    mini_batch_size: MiniBatchOpt = None,
    tau_learning_rate: TauRateOpt = None,
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Train the bundled encoder under each arm; held-out recall, nDCG and MRR at 10 with paired
    bootstrap intervals into OUT/results.json and OUT/report.html. --config and --set configure
    the `pairsieve clean` of the cleaned arm."""
    from pairsieve.experiment.arms import ARMS, default_arms
    from pairsieve.experiment.runner import run as run_experiment
    from pairsieve.experiment.settings import Settings
    from pairsieve.orchestration.preflight import writable_folder

    writable_folder(out.parent, "--out")  # before an hour of training, not after it

    chosen = _names(arms) if arms else default_arms(truth_column is not None)
    unknown = sorted(set(chosen) - set(ARMS))
    if unknown:
        raise PairsieveError("bad_option", f"unknown arm(s) {unknown}; arms are {', '.join(ARMS)}")
    if "oracle" in chosen and truth_column is None:
        raise PairsieveError("bad_option", "the oracle arm needs --truth-column")
    settings = Settings(
        arms=chosen,
        taus=_floats_or_learned(taus),
        seeds=tuple(range(seeds)),
        steps=steps,
        batch_size=batch_size,
        negatives=negatives,
        max_seq_length=max_seq_length,
        mini_batch_size=mini_batch_size,
        truth_column=truth_column,
    )
    if tau_learning_rate is not None:
        settings = replace(settings, tau_learning_rate=tau_learning_rate)
    results = run_experiment(run, out, settings, config_from_cli(config, overrides))
    summary = [
        {k: row[k] for k in ("arm", "tau", "seeds", "recall@10", "ndcg@10", "mrr@10")}
        for row in results["arms"]
    ]
    print_json(
        {"results": str(out / "results.json"), "report": str(out / "report.html"), "arms": summary}
    )
