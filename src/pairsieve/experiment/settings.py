"""What the arms of one experiment share, and the name of each run's files."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from pairsieve.core.hashing import text_key
from pairsieve.vectors.embed import bundled_model_path

# Every arm an experiment can train; `experiment.arms` builds each one's recipe.
ARMS = (
    "zero-shot",
    "naive",
    "st-best",
    "cleaned",
    "pairsieve",
    "pairsieve-queue",
    "pairsieve-guided",
    "pairsieve-contrast",
    "pairsieve-gist",
    "pairsieve-contrast-guided",
    "shards-stock",
    "oracle",
)


@dataclass(frozen=True)
class Settings:
    """Everything shared by the arms of one experiment."""

    arms: tuple[str, ...] = ARMS
    taus: tuple[float | str, ...] = (0.05,)
    seeds: tuple[int, ...] = (0,)
    steps: int = 100
    batch_size: int = 64
    learning_rate: float = 2e-5
    # A learned τ's own rate: at the encoder's 2e-5 its log-scale moves ~1e-5 a step and a
    # 100-step run never leaves CLIP's start; at 0.05 Adam can cross the range from τ 0.1 to the
    # clamp at 0.01 (a log-distance of 2.3) within the run, so the trace shows where τ settles.
    tau_learning_rate: float = 0.05
    warmup_ratio: float = 0.1
    max_seq_length: int = 32
    negatives: int = 1
    # Rows embedded at once by the cached (GradCache) form of each arm's loss; None trains with
    # the plain losses. Same gradients either way: only the memory of a large batch changes.
    mini_batch_size: int | None = None
    truth_column: str | None = None
    base_model: str = field(default_factory=lambda: str(bundled_model_path()))

    def run_key(self, arm: str, tau: float | str, seed: int, fingerprint: str) -> str:
        """The file stem of one run's scores: its arm, τ and seed, and a hash of the rest. A
        setting left unset (None) is not hashed, so adding an optional setting renames no kept
        run."""
        shared = {
            k: v
            for k, v in asdict(self).items()
            if k not in ("arms", "taus", "seeds") and v is not None
        }
        digest = text_key(repr((sorted(shared.items()), fingerprint))) & 0xFFFFFFFF
        return f"{arm}-tau{tau}-seed{seed}-{digest:08x}"
