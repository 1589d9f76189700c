"""Statistics of a reproduction: seed standard errors, steps to a threshold, and verdicts that can fail.

A verdict compares our seed mean with a target (the paper's number, or the reference code's seeds) and
returns one of

* ``"consistent"``   — the 95% interval of the difference lies inside ±δ, the *resolution*: the smallest
  difference the comparison is meant to resolve (e.g. half the paper's TPO–GRPO gap for Table 3);
* ``"inconsistent"`` — the 95% interval lies entirely outside ±δ (the difference is surely larger than δ);
* ``"inconclusive"`` — neither: the interval is too wide for the seeds we have.

Both standard errors enter the interval (ours from our seeds, the target's where known); an unknown target
SE counts as 0, which only makes "consistent" harder to reach, never easier.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from ..seeds import seed_se
from .paper_numbers import NEVER

Z95 = 1.959964
CONSISTENT, INCONSISTENT, INCONCLUSIVE = "consistent", "inconsistent", "inconclusive"
METRICS = {
    "final_error": "final error (%)",
    "steps_to_1pct": "steps to 1%",
    "final_greedy_error": "final greedy test error (%)",
}


def steps_to(curves, threshold: float = 0.01) -> Optional[int]:
    """First 0-based episode whose seed-mean error is below ``threshold``; None if never."""
    mean = np.asarray(curves, float).mean(0)
    hit = np.nonzero(mean < threshold)[0]
    return int(hit[0]) if hit.size else None


def per_seed_steps_to(curves, threshold: float) -> np.ndarray:
    """Each seed's first episode with error below ``threshold``, censored at T (the curve length) if never."""
    c = np.asarray(curves, float)
    below = c < threshold
    return np.where(below.any(1), below.argmax(1), c.shape[1]).astype(float)


def measure(curves, metric: str, n_boot: int = 1000) -> dict:
    """Our number, its seed standard error and the per-seed values, for curves [S, T] in [0, 1]."""
    curves = np.asarray(curves, float)
    S, T = curves.shape
    if metric in ("final_error", "final_greedy_error"):
        per_seed = 100.0 * curves[:, -1]
        return dict(value=float(per_seed.mean()), se=seed_se(per_seed), per_seed=per_seed.tolist())
    if metric == "steps_to_1pct":
        value = steps_to(curves)
        se = float("nan")
        if S > 1:  # bootstrap over seeds; a resample that never reaches 1% counts as T (censored)
            rng = np.random.default_rng(0)
            boots = [steps_to(curves[rng.integers(0, S, S)]) for _ in range(n_boot)]
            se = float(np.std([T if b is None else b for b in boots], ddof=1))
        return dict(value=value, se=se, per_seed=[steps_to(c[None]) for c in curves])
    raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")


def verdict(value, se, target, resolution: float, target_se: float = 0.0) -> Optional[str]:
    """Our mean ± SE against ``target`` (a number, ``NEVER`` for final error above 95%, or a bound
    ``("<", x)`` / ``(">", x)``); ``resolution`` is δ (module docstring). None when there is nothing to compare
    (no target) or no seed SE (one seed)."""
    if target is None or value is None:
        return None
    if se is None or not math.isfinite(se):
        return None
    if not (resolution > 0):
        raise ValueError(f"resolution must be > 0, got {resolution!r}")
    half = Z95 * math.sqrt(se**2 + (target_se or 0.0) ** 2)
    lo, hi = value - half, value + half
    if target == NEVER:
        target = (">", 95.0)
    if isinstance(target, (tuple, list)):  # a bound: consistent if the interval respects it
        op, x = target
        inside, outside = (hi <= x, lo > x + resolution) if op == "<" else (lo >= x, hi < x - resolution)
        return CONSISTENT if inside else INCONSISTENT if outside else INCONCLUSIVE
    d_lo, d_hi = lo - target, hi - target
    return _interval_verdict(d_lo, d_hi, resolution)


def _interval_verdict(lo: float, hi: float, resolution: float) -> str:
    """The rule of the module docstring on a 95% interval [lo, hi] of a difference."""
    if -resolution <= lo and hi <= resolution:
        return CONSISTENT
    if lo > resolution or hi < -resolution:
        return INCONSISTENT
    return INCONCLUSIVE


def steps_verdict(value, target, length: int) -> Optional[str]:
    """Steps to 1% when one side never got there: agreement on "never" is all that can be said."""
    if target is None:
        return None
    if target == NEVER or value is None:
        return CONSISTENT if (target == NEVER) == (value is None) else INCONSISTENT
    return None  # both numbers: use :func:`verdict`


def permutation_test(a, b, n_perm: int = 20000, seed: int = 0) -> float:
    """Two-sided permutation test of equal means (exchangeable seeds): the fraction of random relabelings
    whose absolute mean difference is at least the observed one (with the +1 correction, never exactly 0)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    pooled = np.concatenate([a, b])
    observed = abs(a.mean() - b.mean())
    rng = np.random.default_rng(seed)
    idx = np.argsort(rng.random((n_perm, len(pooled))), axis=1)
    perm = pooled[idx]
    diffs = np.abs(perm[:, : len(a)].mean(1) - perm[:, len(a) :].mean(1))
    return float((1 + np.sum(diffs >= observed - 1e-12)) / (n_perm + 1))


def bootstrap_diff_ci(a, b, n_boot: int = 20000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of mean(a) − mean(b), resampling seeds within each sample."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    rng = np.random.default_rng(seed)
    da = a[rng.integers(0, len(a), (n_boot, len(a)))].mean(1)
    db = b[rng.integers(0, len(b), (n_boot, len(b)))].mean(1)
    q = (1 - level) / 2
    lo, hi = np.quantile(da - db, [q, 1 - q])
    return float(lo), float(hi)


def two_sample_verdict(a, b, resolution: float) -> dict:
    """Our per-seed values ``a`` against the reference's ``b``: permutation p-value, bootstrap 95% CI of the
    difference of means, and the verdict of the module docstring applied to that CI."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or len(b) < 2:
        return dict(
            p_value=None, ci=None, diff=float(a.mean() - b.mean()), verdict=INCONCLUSIVE, note="fewer than two seeds"
        )
    p = permutation_test(a, b)
    lo, hi = bootstrap_diff_ci(a, b)
    diff = float(a.mean() - b.mean())
    return dict(p_value=p, ci=[lo, hi], diff=diff, verdict=_interval_verdict(lo, hi, resolution), resolution=resolution)


def kendall_tau(a: Sequence[str], b: Sequence[str]) -> float:
    """Rank agreement of two orderings of the same items (1 = same order, −1 = reversed)."""
    items = [x for x in a if x in b]
    ra, rb = {x: i for i, x in enumerate(a)}, {x: i for i, x in enumerate(b)}
    pairs = [(x, y) for i, x in enumerate(items) for y in items[i + 1 :]]
    if not pairs:
        return float("nan")
    s = sum(np.sign(ra[x] - ra[y]) * np.sign(rb[x] - rb[y]) for x, y in pairs)
    return float(s / len(pairs))


def paper_text(paper) -> str:
    if paper is None:
        return ""
    if paper == NEVER:
        return "−"
    if isinstance(paper, (tuple, list)):
        return f"{paper[0]} {paper[1]:g}"
    return f"{paper:g}"
