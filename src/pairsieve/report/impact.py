"""The maths of duplicate impact: InfoNCE loss and gradients by temperature, in-batch collisions.

Two questions drive the report. *How often* does a trainer meet a false negative? A batch of B
rows drawn from N rows whose positives fall into products of sizes n_c holds, per anchor,
(B - 1)·κ same-product candidates on average, with κ = Σ n_c(n_c - 1) / (N(N - 1)) the chance
that two random rows share a product. *What does one cost?* InfoNCE with temperature τ puts
gradient weight p_j/τ on negative j, p = softmax(s/τ); a same-product candidate scoring δ below
the positive leaves a loss floor log(1 + e^(-δ/τ)) that no model can train away, and at small τ
it owns most of the push on negatives (Wang & Liu, CVPR 2021, "Understanding the Behaviour of
Contrastive Loss", sec. 3: the hardness-aware property of small temperatures).

Everything here is plain numpy over small arrays, computed with log-sum-exp so τ = 0.02 on
cosine scores (logits up to 50) does not overflow.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

# The 2-pair mini-batch of the worked example (rows = queries, columns = listings, positives on
# the diagonal) and row 2 with an exact copy of its positive added as a third candidate.
WORKED_BATCH = ((0.9, 0.6), (0.7, 0.8))
WORKED_DUPLICATE_ROW = (0.7, 0.8, 0.8)


def _logsumexp(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """log Σ exp(x) along ``axis``; rows that are all -inf give -inf instead of nan."""
    top = np.max(x, axis=axis, keepdims=True)
    safe_top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - safe_top), axis=axis, keepdims=True)) + safe_top
    return np.squeeze(out, axis=axis)


def softmax(scores: Sequence[float] | np.ndarray, tau: float) -> np.ndarray:
    """softmax(s/τ) along the last axis, stable for any τ > 0."""
    logits = np.asarray(scores, dtype=np.float64) / tau
    return np.exp(logits - _logsumexp(logits)[..., None])


def infonce_loss(scores: Sequence[float] | np.ndarray, positive: int, tau: float) -> float:
    """One row's InfoNCE loss -log softmax(s/τ)[positive] = logsumexp(s/τ) - s_pos/τ."""
    logits = np.asarray(scores, dtype=np.float64) / tau
    return float(_logsumexp(logits) - logits[positive])


def infonce_grad(scores: Sequence[float] | np.ndarray, positive: int, tau: float) -> np.ndarray:
    """∂L/∂s for one row: (p - onehot(positive))/τ. Negatives get p_j/τ > 0, the positive < 0."""
    grad = softmax(scores, tau)
    grad[positive] -= 1.0
    return grad / tau


def negative_share(
    scores: Sequence[float] | np.ndarray, positive: int, candidate: int, tau: float
) -> float:
    """Share of the push on negatives that ``candidate`` owns: p_c / Σ_{j≠positive} p_j.

    Because ∂L/∂s_j = p_j/τ for every negative, this is both its share of the negative softmax
    mass and of the negative gradient.
    """
    p = softmax(scores, tau)
    negatives = np.delete(p, positive)
    return float(p[candidate] / negatives.sum())


def loss_floor(delta: float | np.ndarray, tau: float) -> float | np.ndarray:
    """Loss a same-product candidate δ below the positive adds even if every true negative is
    infinitely far: log(1 + e^(-δ/τ)). At δ = 0 it is log 2 whatever τ is."""
    return np.logaddexp(0.0, -np.asarray(delta, dtype=np.float64) / tau)


def copies_floor(m: int) -> float:
    """Loss floor of m exact copies of the positive among the candidates: log(1 + m)."""
    return float(np.log1p(m))


def false_negative_share(
    false_scores: np.ndarray, true_scores: np.ndarray, tau: float
) -> np.ndarray:
    """Per row, the share of the negative gradient owned by false negatives.

    Args:
        false_scores: (rows, a) float, scores of same-product candidates, -inf padded.
        true_scores: (rows, b) float, scores of true negatives, -inf padded.
    Returns:
        (rows,) float64 in [0, 1]: Σ_false p / Σ_all-negatives p; nan for rows with no negative.
    """
    false_lse = _logsumexp(np.asarray(false_scores, dtype=np.float64) / tau, axis=1)
    true_lse = _logsumexp(np.asarray(true_scores, dtype=np.float64) / tau, axis=1)
    both = np.logaddexp(false_lse, true_lse)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(both), np.exp(false_lse - both), np.nan)


def worked_example(temperatures: Sequence[float]) -> list[dict[str, float]]:
    """The 2-pair example per τ: row losses, their mean, and row 2 with a duplicate positive."""
    rows = []
    for tau in temperatures:
        row1 = infonce_loss(WORKED_BATCH[0], 0, tau)
        row2 = infonce_loss(WORKED_BATCH[1], 1, tau)
        duplicate = infonce_loss(WORKED_DUPLICATE_ROW, 1, tau)
        rows.append(
            {
                "tau": tau,
                "row1_loss": row1,
                "row2_loss": row2,
                "mean_loss": (row1 + row2) / 2,
                "row2_with_duplicate_loss": duplicate,
            }
        )
    return rows


# --- in-batch collisions -------------------------------------------------------------------------


def collision_rate(sizes: Sequence[int] | np.ndarray) -> float:
    """κ = Σ n_c(n_c - 1) / (N(N - 1)): chance two distinct random rows share a group."""
    n = np.asarray(sizes, dtype=np.float64)
    total = n.sum()
    if total < 2:
        return 0.0
    return float((n * (n - 1)).sum() / (total * (total - 1)))


def expected_false_negatives(batch_size: int, kappa: float) -> float:
    """Same-group in-batch candidates per anchor in a uniformly random batch: (B - 1)·κ."""
    return (batch_size - 1) * kappa


def expected_colliding_pairs(batch_size: int, kappa: float) -> float:
    """Same-group row pairs per uniformly random batch: C(B, 2)·κ."""
    return batch_size * (batch_size - 1) / 2 * kappa


def clean_batch_probabilities(
    sizes: Sequence[int] | np.ndarray, batch_sizes: Sequence[int]
) -> dict[int, float | None]:
    """Exact P(a batch of B rows drawn without replacement has no two rows of one group), for
    every B in ``batch_sizes`` (None where B exceeds the number of rows).

    The clean B-subsets are counted by the elementary symmetric polynomial e_B(n_1, …, n_G)
    (pick B groups, one row from each), kept in probability space, f_k = e_k / C(M, k) for the
    M rows seen so far, so nothing overflows (`_fold_groups`). Singletons are folded in at the
    end with a hypergeometric mixture, P(B) = Σ_j Hyp(j singletons) · f_{B-j}.
    Cost O(G_multi · max B), compiled.
    """
    n = np.asarray(sizes, dtype=np.int64)
    n = n[n > 0]
    total = int(n.sum())
    fitting = [int(b) for b in batch_sizes if b <= total]
    out: dict[int, float | None] = {int(b): None for b in batch_sizes}
    if not fitting:
        return out
    multi = n[n > 1]
    f = _fold_groups(multi, max(fitting))
    seen = int(multi.sum())
    singles = total - seen
    lf = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, total + 1)))])  # log k!
    for b in fitting:
        j = np.arange(max(0, b - seen), min(b, singles) + 1)  # singletons drawn
        log_hyp = (
            lf[singles]
            - lf[j]
            - lf[singles - j]
            + lf[seen]
            - lf[b - j]
            - lf[seen - b + j]
            - (lf[total] - lf[b] - lf[total - b])
        )
        out[b] = float(np.sum(np.exp(log_hyp) * f[b - j]))
    return out


@njit(cache=True)
def _fold_groups(sizes: np.ndarray, top: int) -> np.ndarray:
    """f_k = P(k rows drawn from the groups in ``sizes`` all come from distinct groups), k <= top.

    Adding a group of n rows to M seen ones: f'_k = C(M,k)/C(M+n,k) · f_k + n·C(M,k-1)/C(M+n,k)
    · f_{k-1} = P_k · ((M-k+1) · f_k + n·k · f_{k-1}), where P_k = Π_{t=2..n}(M-k+t) /
    Π_{i=1..n}(M+i) starts at 1/(M+1) and steps by P_k = P_{k-1} · (M-k+2)/(M-k+1+n): one pass
    of multiplications per group, no factorials.
    """
    f = np.zeros(top + 1)
    f[0] = 1.0
    seen = 0
    for size in sizes:
        step = 1.0 / (seen + 1)
        before = 0.0  # f_{k-1} before this group
        for k in range(min(top, seen + size) + 1):
            if k:
                step *= (seen - k + 2) / (seen - k + 1 + size)
            current = f[k]
            f[k] = step * ((seen - k + 1) * current + size * k * before)
            before = current
        seen += size
    return f


def p_batch_clean(sizes: Sequence[int] | np.ndarray, batch_size: int) -> float | None:
    """P(a random batch of ``batch_size`` rows is free of same-group pairs); see
    `clean_batch_probabilities`. None when the batch exceeds the number of rows."""
    return clean_batch_probabilities(sizes, [batch_size])[int(batch_size)]


def collision_table(
    sizes: Sequence[int] | np.ndarray, batch_sizes: Sequence[int]
) -> list[dict[str, float | int | None]]:
    """κ-derived figures per batch size for one grouping of the rows (text or product level)."""
    kappa = collision_rate(sizes)
    total = int(np.asarray(sizes).sum())
    clean = clean_batch_probabilities(sizes, batch_sizes)
    rows = []
    for b in batch_sizes:
        fits = b <= total
        rows.append(
            {
                "batch_size": int(b),
                "kappa": kappa,
                "false_negatives_per_anchor": expected_false_negatives(b, kappa) if fits else None,
                "colliding_pairs_per_batch": expected_colliding_pairs(b, kappa) if fits else None,
                "p_batch_clean": clean[int(b)],
            }
        )
    return rows


def realised_collisions(
    groups: np.ndarray, batch_size: int, negatives: np.ndarray | None = None
) -> dict[str, float | int]:
    """False negatives actually present when rows are cut, in training order, into consecutive
    batches of ``batch_size`` (the last one may be short).

    Args:
        groups: (rows,) int, the product (or text) id of each row's positive.
        negatives: optional (rows, k) int, ids of each row's hard negatives, -1 padded. With a
            multiple-negatives loss every anchor is scored against all positives and all hard
            negatives of its batch, so a negative of *any* row that is the anchor's product counts.
    """
    groups = np.asarray(groups, dtype=np.int64)
    pairs = dirty = from_negatives = 0
    for start in range(0, len(groups), batch_size):
        batch = groups[start : start + batch_size]
        _, counts = np.unique(batch, return_counts=True)
        batch_pairs = int((counts * (counts - 1) // 2).sum())
        hits = 0
        if negatives is not None:
            hits = _negative_hits(batch, np.asarray(negatives[start : start + batch_size]).ravel())
        pairs += batch_pairs
        from_negatives += hits
        dirty += (batch_pairs + hits) > 0
    rows = max(len(groups), 1)
    return {
        "batch_size": int(batch_size),
        "batches": int((len(groups) + batch_size - 1) // batch_size),
        "colliding_pairs": pairs,
        "false_negatives_per_anchor": 2 * pairs / rows,
        "hard_negative_false_negatives_per_anchor": from_negatives / rows,
        "dirty_batches": int(dirty),
    }


def _negative_hits(batch: np.ndarray, negatives: np.ndarray) -> int:
    """Σ over anchors of the batch's hard negatives that share the anchor's positive group."""
    values, counts = np.unique(negatives[negatives >= 0], return_counts=True)
    per_group = dict(zip(values.tolist(), counts.tolist(), strict=True))
    return int(sum(per_group.get(g, 0) for g in batch.tolist()))


# --- temperature ---------------------------------------------------------------------------------


def temperature_table(
    positive_scores: np.ndarray,
    false_scores: np.ndarray,
    true_scores: np.ndarray,
    temperatures: Sequence[float],
) -> list[dict[str, float | int]]:
    """Per τ, what same-product candidates cost on the data's own scores.

    Args:
        positive_scores: (rows,) score of each row's positive.
        false_scores: (rows, a) scores of the row's same-product candidates, -inf padded.
        true_scores: (rows, b) scores of the row's true negatives, -inf padded.
    The loss floor uses the nearest same-product candidate (gap δ = s_pos - max s_false); the
    gradient share uses all of them against the true negatives. Rows without a same-product
    candidate add no floor and are left out of both means (their count is reported).
    """
    positive_scores = np.asarray(positive_scores, dtype=np.float64)
    false_scores = np.asarray(false_scores, dtype=np.float64)
    if false_scores.ndim == 1:  # one same-product score per row
        false_scores = false_scores[:, None]
    nearest = false_scores.max(axis=1, initial=-np.inf)
    has_false = np.isfinite(nearest)
    delta = positive_scores[has_false] - nearest[has_false]
    rows = []
    for tau in temperatures:
        floors = loss_floor(delta, tau)
        share = false_negative_share(false_scores[has_false], true_scores[has_false], tau)
        share = share[np.isfinite(share)]
        rows.append(
            {
                "tau": float(tau),
                "rows_with_false_negative": int(has_false.sum()),
                "mean_gap": float(delta.mean()) if delta.size else 0.0,
                "mean_loss_floor": float(floors.mean()) if floors.size else 0.0,
                "false_negative_gradient_share": float(share.mean()) if share.size else 0.0,
            }
        )
    return rows
