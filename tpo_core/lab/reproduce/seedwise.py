"""Seed-by-seed comparison of two groups of error curves: ours against the reference code's, or TPO against GRPO.

**Why not one number.** Under the terminal reward of Table 3 a seed either solves the task or does not, and a
seed that solved can relapse (TPO with Muon does, in the reference code as in ours: its own H = 10 file has
seeds that climb back to 96–98 % error after solving, and two of its 20 never solve). The seed mean of the
final error is then dominated by whether one seed happened to be relapsing in the last few episodes, and a
single 8-vs-8 test of it rejects a true "same code" about 1 time in 100 by that alone. This module compares
the whole distributions of four per-seed statistics instead, with a late-phase statistic first.

**Units.** Our per-seed files (``curve_error``) and the reference's ``*_errors`` arrays hold, per episode, the
fraction of that episode's sampled answers (B × K = 100 × 8 at Table 3's setting) that miss the target: a
number in [0, 1], in steps of 1/800. Curves enter every function here as such fractions, [S, T] (seeds ×
episodes); errors come out in **percent** (points), steps in **episodes** (0-based), so that 0.10 in a curve is
10 % here. The thresholds below are fractions.

**Per-seed statistics** (:func:`per_seed`):

* ``final``  — final error: the mean of the last ``FINAL_EPISODES`` (10) episodes, in %;
* ``late``   — late-phase mean error: the mean over the second half of the run (episodes 1000–1999 of a
  2000-episode run; episodes ⌊T/2⌋ … T−1 of a shorter one), in %;
* ``steps``  — steps to 10 % error: the first episode whose error is at or below ``STEPS_LEVEL``
  (0.10); ``inf`` if the seed never gets there;
* ``solved`` — ever solved: the seed's error went below ``SOLVED_LEVEL`` (5 %) at some episode.

**Tests between two groups** (:func:`compare`): for ``final``, ``late`` and ``steps`` a two-sided
permutation test of equal means (:func:`tpo_core.lab.reproduce.stats.permutation_test`) and a two-sided
Mann–Whitney rank test (:func:`mann_whitney`); for ``solved``, Fisher's exact test (two-sided,
:func:`fisher_exact`) on the 2 × 2 table of never-solved and solved seeds. Steps to 10 % of a seed that never
gets there are +inf in the rank test (ranks handle it: such a seed ranks after every seed that got there,
tied with the other never-reaching ones); the permutation test of means, which needs finite numbers, counts
such a seed at T (the run's length, one past its last episode), which gives the same ranks.

**The rule** (:func:`rule`), fixed before the H = 10 runs to 20 seeds finish; its thresholds are the module
constants ``MIN_SEEDS``, ``P_STRONG`` and ``P_WEAK``:

1. **"too few seeds"** if either group has fewer than ``MIN_SEEDS`` = 16 seeds;
2. else **"differs"** if the late-phase Mann–Whitney p < ``P_STRONG`` = 0.01, or if the late-phase
   Mann–Whitney p < ``P_WEAK`` = 0.05 *and* at least one of the final-error Mann–Whitney test and the
   never-solved Fisher test also has p < ``P_WEAK``;
3. else **"consistent"** for ours against the reference (consistent with the reference), and **"no difference
   shown"** for two methods of one code (TPO against GRPO), where "consistent" would read as agreement with
   something.

Why this rule. *Late phase first*: the mean over 1000 episodes is what a relapse in the last 50 episodes
cannot swing (it moves it by at most 5 points) while a seed that is stuck, or relapses for long, moves it
fully. *Rank test, not means*: one seed at 98 % among seeds near 0 moves a mean by 5 points at 20 seeds, but a
rank by one place. *False alarms*: every path to "differs" needs the late-phase p < 0.05, so a comparison of
two groups from one distribution says "differs" at most 5 % of the time (the exact rank test's size is at
most its level), and 1 % when the late phase alone decides. Checked on the reference's own file: two
groups of 20 seeds drawn (with replacement) from its 20 TPO seeds get "differs" in 7 of 400 draws, from its
GRPO seeds in 17 of 400. *Corroboration between 0.01 and 0.05*: a late-phase difference is believed there
only if the final error or the count of never-solved seeds, the paper's own statistics, points the same way.
*16 seeds*: a seed is then at most 1/16 of its group; a two-sided rank test at p < 0.05 detects a shift of
one standard deviation 74 % of the time at 16 + 16 seeds but 46 % at 9 + 9 (400 simulated normal draws
each); and the side-by-side runs of both codes on a small configuration (32 of ours against 16 of the
reference's) were compared at that size. Below it, the p-values are still computed and shown, but no
verdict is drawn.

The comparison of our seed means with the *paper's* numbers keeps the project's rule
(:func:`tpo_core.lab.reproduce.stats.verdict`, :func:`tpo_core.lab.reproduce.stats.two_sample_verdict`).

:func:`h10_comparison` applies all of this to Table 3's H = 10 headline: each method of ours against the
reference's, and TPO against GRPO within ours and within the reference; :func:`load_h10` reads the committed
per-seed files and the reference file for it. NumPy only (scipy, where installed, is used by the tests).
"""

from __future__ import annotations

import math
import pathlib
from typing import Optional

import numpy as np

from .stats import permutation_test

FINAL_EPISODES = 10  # final error: mean of the last 10 episodes
LATE_FRACTION = 0.5  # late phase: the second half of the run (episodes 1000-1999 of 2000)
STEPS_LEVEL = 0.10  # steps to 10 % error: first episode at or below this fraction
SOLVED_LEVEL = 0.05  # ever solved: some episode below this fraction
RELAPSE_LEVEL = 0.50  # a solved seed "relapsed" if its error later rose above this fraction
MIN_SEEDS = 16  # the rule: fewer seeds on either side -> "too few seeds"
P_STRONG = 0.01  # the rule: late-phase rank p below this alone -> "differs"
P_WEAK = 0.05  # the rule: late-phase p below this and a corroborating test below this -> "differs"
N_PERM = 20000  # relabelings of the permutation test
EXACT_MAX_SEEDS = 80  # Mann-Whitney "auto": exact when both groups together have at most this many seeds
_TOL = 1e-6  # float32 curves: 0.1 stored as 0.10000000149 still counts as "at or below 10 %"

CONSISTENT, DIFFERS, TOO_FEW = "consistent", "differs", "too few seeds"
NO_DIFFERENCE = "no difference shown"  # the third outcome when two methods of one code are compared
STATISTICS = {
    "late": "late-phase mean error (%)",
    "final": f"final error (%, mean of the last {FINAL_EPISODES} episodes)",
    "steps": f"steps to {100 * STEPS_LEVEL:.0f} % error (episodes)",
    "solved": f"never solved (no episode below {100 * SOLVED_LEVEL:.0f} %)",
}
RULE = (
    f"too few seeds if either side has fewer than {MIN_SEEDS}; else differs if the late-phase Mann-Whitney "
    f"p < {P_STRONG:g}, or if it is < {P_WEAK:g} and the final-error Mann-Whitney p or the never-solved "
    f"Fisher p is also < {P_WEAK:g}; else consistent (ours against the reference) or "
    f"{NO_DIFFERENCE} (two methods of one code)"
)


# ----------------------------------------------------------------------------------------------------------------
# per-seed statistics
# ----------------------------------------------------------------------------------------------------------------
def _curves(curves) -> np.ndarray:
    c = np.asarray(curves, float)
    if c.ndim != 2 or c.shape[0] < 1 or c.shape[1] < 2:
        raise ValueError(f"curves must be [seeds, episodes] with at least 2 episodes, got shape {c.shape}")
    if not np.all(np.isfinite(c)):
        raise ValueError("curves must be finite error fractions")
    return c


def late_window(length: int) -> tuple[int, int]:
    """The late phase of a run of ``length`` episodes as [start, stop): its second half (1000, 2000) for 2000."""
    return int(length - round(length * LATE_FRACTION)), int(length)


def per_seed(curves) -> dict:
    """The module's four statistics of each seed of ``curves`` [S, T] (error fractions): ``final`` and
    ``late`` in %, ``steps`` in episodes (``inf`` = never at or below 10 %), ``solved`` (bool), and ``min``
    (the seed's lowest error, in %). Each an array [S]."""
    c = _curves(curves)
    S, T = c.shape
    lo, hi = late_window(T)
    reached = c <= STEPS_LEVEL + _TOL
    return dict(
        final=100 * c[:, -min(FINAL_EPISODES, T) :].mean(1),
        late=100 * c[:, lo:hi].mean(1),
        steps=np.where(reached.any(1), reached.argmax(1), np.inf).astype(float),
        solved=(c < SOLVED_LEVEL - _TOL).any(1),
        min=100 * c.min(1),
    )


def seed_outcomes(curves) -> dict:
    """What became of each seed: ``never_solved`` (no episode below 5 %), ``solved``, ``relapsed`` (solved,
    then above 50 % error at some later episode), ``ends_relapsed`` (solved, but its final error is at or
    above 10 %), ``worst_relapse`` (the highest error of a solved seed after it first solved, in %; None if none
    solved), with ``seeds`` lists of the seed positions for the last two and for ``never_solved``."""
    c = _curves(curves)
    st = per_seed(c)
    below = c < SOLVED_LEVEL - _TOL
    first = np.where(below.any(1), below.argmax(1), c.shape[1])
    after = np.array([c[i, f:].max() if f < c.shape[1] else np.nan for i, f in enumerate(first)])
    solved = st["solved"]
    relapsed = solved & (after > RELAPSE_LEVEL)
    ends = solved & (st["final"] >= 100 * STEPS_LEVEL - 1e-9)
    pos = lambda m: [int(i) for i in np.nonzero(m)[0]]  # noqa: E731
    return dict(
        n=int(len(c)),
        solved=int(solved.sum()),
        never_solved=int((~solved).sum()),
        relapsed=int(relapsed.sum()),
        ends_relapsed=int(ends.sum()),
        worst_relapse=float(100 * np.nanmax(after)) if solved.any() else None,
        never_solved_seeds=pos(~solved),
        relapsed_seeds=pos(relapsed),
        ends_relapsed_seeds=pos(ends),
    )


# ----------------------------------------------------------------------------------------------------------------
# tests
# ----------------------------------------------------------------------------------------------------------------
def midranks(x) -> np.ndarray:
    """Ranks 1..n of ``x`` with ties given their average rank (``inf`` is a value like any other; no NaN)."""
    x = np.asarray(x, float)
    if np.any(np.isnan(x)):
        raise ValueError("midranks: NaN in the values")
    order = np.argsort(x, kind="mergesort")
    _, start, counts = np.unique(x[order], return_index=True, return_counts=True)
    ranks = np.empty(len(x))
    ranks[order] = np.repeat(start + (counts + 1) / 2.0, counts)
    return ranks


def _rank_sum_counts(pooled: np.ndarray, n1: int) -> tuple[np.ndarray, int]:
    """Number of ways each doubled rank sum arises when ``n1`` of the pooled values are drawn without
    replacement (the permutation distribution given the ties): counts[s] for s = 2·(rank sum)."""
    _, counts = np.unique(pooled, return_counts=True)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    weights = (2 * starts + counts + 1).astype(int)  # doubled midranks, one per tie group
    top = int(np.sum(np.sort(np.repeat(weights, counts))[::-1][:n1]))
    dp = np.zeros((n1 + 1, top + 1))
    dp[0, 0] = 1.0
    for g, w in zip(counts, weights):
        new = dp.copy()
        for j in range(1, min(int(g), n1) + 1):
            shift = j * int(w)
            if shift > top:
                break
            new[j:, shift:] += math.comb(int(g), j) * dp[: n1 + 1 - j, : top + 1 - shift]
        dp = new
    return dp[n1], top


def mann_whitney(a, b, method: str = "auto") -> dict:
    """Two-sided Mann–Whitney rank test of ``a`` against ``b`` (``inf`` allowed; ties get midranks).

    Returns ``U`` (scipy's convention: U of ``a`` = its rank sum − n_a(n_a+1)/2, the number of pairs where
    ``a`` is larger, ties counting ½), ``p`` and the ``method`` used. ``"exact"``: the permutation
    distribution of the rank sum given the observed ties, p = P(``|R − E R| ≥ |r − E R|``) (with no ties this is
    scipy's exact p); ``"asymptotic"``: the normal approximation with the tie correction and a continuity
    correction of ½ (scipy's ``method="asymptotic"``); ``"auto"``: exact up to ``EXACT_MAX_SEEDS`` seeds in
    all. All values tied: p = 1."""
    a, b = np.asarray(a, float).ravel(), np.asarray(b, float).ravel()
    n1, n2 = len(a), len(b)
    if n1 < 1 or n2 < 1:
        raise ValueError(f"mann_whitney needs at least one value on each side, got {n1} and {n2}")
    if method not in ("auto", "exact", "asymptotic"):
        raise ValueError(f"method must be 'auto', 'exact' or 'asymptotic', got {method!r}")
    pooled = np.concatenate([a, b])
    ranks = midranks(pooled)
    r1 = float(ranks[:n1].sum())
    u1 = r1 - n1 * (n1 + 1) / 2
    n = n1 + n2
    if method == "auto":
        method = "exact" if n <= EXACT_MAX_SEEDS else "asymptotic"
    _, ties = np.unique(pooled, return_counts=True)
    if len(ties) == 1:
        return dict(U=u1, p=1.0, method=method)
    if method == "exact":
        counts, _ = _rank_sum_counts(pooled, n1)
        sums = np.arange(len(counts))
        center = n1 * (n + 1)  # doubled E[R]
        observed = abs(int(round(2 * r1)) - center)
        p = counts[np.abs(sums - center) >= observed].sum() / math.comb(n, n1)
        return dict(U=u1, p=float(min(1.0, p)), method="exact")
    mu = n1 * n2 / 2
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - float(np.sum(ties**3 - ties)) / (n * (n - 1))))
    z = (max(u1, n1 * n2 - u1) - mu - 0.5) / sigma
    return dict(U=u1, p=float(min(1.0, math.erfc(z / math.sqrt(2)))), method="asymptotic")


def fisher_exact(table) -> float:
    """Two-sided Fisher exact test of a 2 × 2 table of counts [[a, b], [c, d]] (rows: the two groups): the
    total hypergeometric probability, margins fixed, of every table no more probable than the observed one
    (the usual two-sided definition, as scipy's ``fisher_exact``); computed with exact integers."""
    t = np.asarray(table)
    if t.shape != (2, 2) or np.any(t < 0) or np.any(t != np.round(t)):
        raise ValueError(f"table must be a 2 x 2 table of non-negative counts, got {table!r}")
    (a, b), (c, d) = [[int(v) for v in row] for row in t]
    r1, c1, n = a + b, a + c, a + b + c + d
    if n == 0:
        return 1.0
    weight = lambda x: math.comb(c1, x) * math.comb(n - c1, r1 - x)  # noqa: E731  (∝ the pmf)
    observed = weight(a)
    support = range(max(0, r1 + c1 - n), min(r1, c1) + 1)
    return float(min(1.0, sum(w for w in map(weight, support) if w <= observed) / math.comb(n, r1)))


# ----------------------------------------------------------------------------------------------------------------
# the comparison and the rule
# ----------------------------------------------------------------------------------------------------------------
def rule(
    n_a: int,
    n_b: int,
    p_late: Optional[float],
    p_final: Optional[float],
    p_solved: Optional[float],
    same: str = CONSISTENT,
) -> tuple:
    """(verdict, reason) by the rule of the module docstring, from the seed counts and the late-phase and
    final-error Mann–Whitney p-values and the never-solved Fisher p-value. ``same`` is the word for "no
    difference": ``CONSISTENT`` (ours against the reference) or ``NO_DIFFERENCE`` (two methods)."""
    if same not in (CONSISTENT, NO_DIFFERENCE):
        raise ValueError(f"same must be {CONSISTENT!r} or {NO_DIFFERENCE!r}, got {same!r}")
    if min(n_a, n_b) < MIN_SEEDS:
        return TOO_FEW, f"{min(n_a, n_b)} seeds on one side, fewer than {MIN_SEEDS}"
    if p_late is not None and p_late < P_STRONG:
        return DIFFERS, f"late-phase rank p = {p_late:.3g} < {P_STRONG:g}"
    if p_late is not None and p_late < P_WEAK:
        backing = [
            f"{name} p = {p:.3g}"
            for name, p in (("final-error rank", p_final), ("never-solved Fisher", p_solved))
            if p is not None and p < P_WEAK
        ]
        if backing:
            return DIFFERS, f"late-phase rank p = {p_late:.3g} < {P_WEAK:g}, backed by " + " and ".join(backing)
        return same, (
            f"late-phase rank p = {p_late:.3g} < {P_WEAK:g} but neither the final error nor the "
            "never-solved count differs at that level"
        )
    return same, f"late-phase rank p = {p_late:.3g} ≥ {P_WEAK:g}"


def _finite_or_none(v):
    v = float(v)
    return v if math.isfinite(v) else None


def compare(
    a_curves, b_curves, names=("ours", "reference"), n_perm: int = N_PERM, seed: int = 0, same: str = CONSISTENT
) -> dict:
    """The four statistics of two groups of seeds, their tests and the verdict of :func:`rule`.

    ``a_curves``, ``b_curves``: error curves [S, T] (fractions; the two lengths may differ, each seed's
    statistics use its own run). Returns ``names``, ``n`` (seeds of each), ``statistics`` {late, final,
    steps: {a, b (per-seed lists; ``None`` = never reached, for steps), mean_a, mean_b, median_a, median_b,
    perm_p, rank_p, U}; solved: {never_a, never_b, table, fisher_p}}, ``verdict``, ``reason``, ``rule``.
    Everything is plain JSON (no inf or NaN). ``same``: the verdict's word for "no difference" (:func:`rule`)."""
    a, b = _curves(a_curves), _curves(b_curves)
    sa, sb = per_seed(a), per_seed(b)
    out = {}
    for key in ("late", "final", "steps"):
        xa, xb = sa[key], sb[key]
        # the permutation test needs finite values: "never" counts as T, one past the run's last episode
        fa = np.where(np.isinf(xa), a.shape[1], xa)
        fb = np.where(np.isinf(xb), b.shape[1], xb)
        mw = mann_whitney(xa, xb)
        out[key] = dict(
            a=[_finite_or_none(v) for v in xa],
            b=[_finite_or_none(v) for v in xb],
            mean_a=float(fa.mean()),
            mean_b=float(fb.mean()),
            median_a=_finite_or_none(np.median(xa)),
            median_b=_finite_or_none(np.median(xb)),
            perm_p=permutation_test(fa, fb, n_perm=n_perm, seed=seed) if len(fa) > 1 or len(fb) > 1 else 1.0,
            rank_p=mw["p"],
            U=mw["U"],
            rank_method=mw["method"],
        )
        if key == "steps":
            out[key].update(never_a=int(np.isinf(xa).sum()), never_b=int(np.isinf(xb).sum()))
    never_a, never_b = int((~sa["solved"]).sum()), int((~sb["solved"]).sum())
    table = [[never_a, len(a) - never_a], [never_b, len(b) - never_b]]
    out["solved"] = dict(
        a=[bool(v) for v in sa["solved"]],
        b=[bool(v) for v in sb["solved"]],
        never_a=never_a,
        never_b=never_b,
        table=table,
        fisher_p=fisher_exact(table),
    )
    verdict, reason = rule(
        len(a), len(b), out["late"]["rank_p"], out["final"]["rank_p"], out["solved"]["fisher_p"], same
    )
    return dict(
        names=list(names),
        n=[int(len(a)), int(len(b))],
        length=[int(a.shape[1]), int(b.shape[1])],
        statistics=out,
        verdict=verdict,
        reason=reason,
        rule=RULE,
    )


def h10_comparison(ours: dict, reference: Optional[dict] = None, n_perm: int = N_PERM) -> dict:
    """Table 3's H = 10 headline seed by seed. ``ours``, ``reference``: {method: error curves [S, T]} (e.g.
    {"tpo": ..., "grpo": ...}). Returns {"comparisons": {label: :func:`compare` result}, "outcomes": {side:
    {method: :func:`seed_outcomes`}}, "rule": RULE, "thresholds": ...}, with the labels
    ``"<m>: ours vs reference"`` for every method on both sides, ``"ours: tpo vs grpo"`` and
    ``"reference: tpo vs grpo"`` where both methods are there."""
    reference = reference or {}
    comparisons = {}
    for m in ours:
        if m in reference:
            comparisons[f"{m}: ours vs reference"] = compare(ours[m], reference[m], ("ours", "reference"), n_perm)
    for side, curves in (("ours", ours), ("reference", reference)):
        if "tpo" in curves and "grpo" in curves:
            comparisons[f"{side}: tpo vs grpo"] = compare(
                curves["tpo"], curves["grpo"], ("tpo", "grpo"), n_perm, same=NO_DIFFERENCE
            )
    outcomes = {
        side: {m: seed_outcomes(c) for m, c in curves.items()}
        for side, curves in (("ours", ours), ("reference", reference))
        if curves
    }
    return dict(
        comparisons=comparisons,
        outcomes=outcomes,
        rule=RULE,
        thresholds=dict(
            min_seeds=MIN_SEEDS,
            p_strong=P_STRONG,
            p_weak=P_WEAK,
            final_episodes=FINAL_EPISODES,
            late_fraction=LATE_FRACTION,
            steps_level=STEPS_LEVEL,
            solved_level=SOLVED_LEVEL,
            relapse_level=RELAPSE_LEVEL,
            n_perm=n_perm,
        ),
    )


H10_FOLDER = "table3_paper_h10"
H10_RUNS = {"tpo": "tpo_H_10_P", "grpo": "grpo_H_10_P"}


def load_h10(results=None, reference_file=None, allow_download: bool = True) -> tuple[dict, dict]:
    """(ours, reference): {method: error curves [S, T]} of the committed H = 10 per-seed runs
    (``results/table3_paper_h10``, the seeds present now; nothing is retrained) and of the reference file (see
    ``tpo_core.lab.reproduce.reference.reference_path``). Either is {} where it cannot be found."""
    from . import committed
    from . import reference as ref

    root = pathlib.Path(results) if results is not None else committed.find_results()
    ours = {}
    if root is not None and (root / H10_FOLDER).is_dir():
        runs = committed.load_runs(root / H10_FOLDER)
        ours = {m: runs[name].curves["error"] for m, name in H10_RUNS.items() if name in runs}
    path = reference_file if reference_file is not None else ref.reference_path(allow_download=allow_download)
    theirs = {}
    if path is not None and pathlib.Path(path).exists():
        theirs = {m: c for m, c in ref.load_reference(path).items() if m in H10_RUNS}
    return ours, theirs
