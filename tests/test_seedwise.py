"""tpo_core.lab.reproduce.seedwise: per-seed statistics, the rank and Fisher tests, the permutation test's calibration,
the seed-wise rule, and its use on Table 3's H = 10 runs (committed seeds and the reference's file)."""

import itertools
import json
import math
import pathlib

import numpy as np
import pytest

from tpo_core.lab.reproduce import seedwise as sw
from tpo_core.lab.reproduce.stats import permutation_test

ROOT = pathlib.Path(__file__).resolve().parents[1]


# -- per-seed statistics -------------------------------------------------------------------------------------------
def test_per_seed_statistics_match_hand_computed_values():
    steps_down = [1.0] * 5 + [0.5] * 5 + [0.1] * 5 + [0.0] * 5  # T = 20: late phase = episodes 10..19
    blip = [1.0] * 3 + [0.04] + [1.0] * 16  # solved once at episode 3, then relapsed
    stuck = [0.5] * 20
    st = sw.per_seed(np.array([steps_down, blip, stuck], np.float32))  # float32 0.1: still "at or below 10 %"
    np.testing.assert_allclose(st["final"], [100 * (5 * 0.1) / 10, 100.0, 50.0], atol=1e-4)
    np.testing.assert_allclose(st["late"], [5.0, 100.0, 50.0], atol=1e-4)
    np.testing.assert_array_equal(st["steps"], [10.0, 3.0, np.inf])
    np.testing.assert_array_equal(st["solved"], [True, True, False])
    np.testing.assert_allclose(st["min"], [0.0, 4.0, 50.0], atol=1e-4)
    out = sw.seed_outcomes(np.array([steps_down, blip, stuck]))
    assert (out["n"], out["solved"], out["never_solved"], out["relapsed"], out["ends_relapsed"]) == (3, 2, 1, 1, 1)
    assert out["never_solved_seeds"] == [2] and out["relapsed_seeds"] == [1] and out["worst_relapse"] == 100.0


def test_the_late_phase_is_episodes_1000_to_1999_of_a_2000_episode_run():
    assert sw.late_window(2000) == (1000, 2000) and sw.late_window(600) == (300, 600) and sw.late_window(7) == (3, 7)
    c = np.zeros((1, 2000))
    c[0, :1000] = 1.0
    c[0, 1000:] = np.linspace(0.0, 0.2, 1000)
    st = sw.per_seed(c)
    assert st["late"][0] == pytest.approx(10.0) and st["final"][0] == pytest.approx(100 * c[0, -10:].mean())
    assert st["steps"][0] == 1000
    with pytest.raises(ValueError, match="seeds, episodes"):
        sw.per_seed(np.zeros(5))
    with pytest.raises(ValueError, match="finite"):
        sw.per_seed(np.full((2, 4), np.nan))


# -- Mann-Whitney ----------------------------------------------------------------------------------------------------
def test_mann_whitney_on_tiny_cases_by_hand():
    # n = 2 + 3 without ties: U counts 0..6 arise in 1, 1, 2, 2, 2, 1, 1 of the C(5, 2) = 10 labelings
    r = sw.mann_whitney([1, 2], [3, 4, 5])
    assert r["U"] == 0 and r["p"] == pytest.approx(2 / 10) and r["method"] == "exact"
    r = sw.mann_whitney([1, 4], [2, 3, 5])  # U = 2: all but the 2 labelings with U = 3
    assert r["U"] == 2 and r["p"] == pytest.approx(8 / 10)
    # ties: pooled (1, 2, 2, 2, 3) has midranks (1, 3, 3, 3, 5); a = (1, 2, 2) has rank sum 7 against E = 9. Of the
    # 10 labelings, rank sums 7 (3 ways) and 11 (3 ways) are at least 2 from 9: p = 6/10
    r = sw.mann_whitney([1, 2, 2], [2, 3])
    assert r["U"] == 7 - 6 and r["p"] == pytest.approx(0.6)
    assert sw.mann_whitney([3, 3], [3, 3, 3])["p"] == 1.0


def test_exact_mann_whitney_with_ties_and_inf_equals_full_enumeration():
    a, b = np.array([0.0, 2.0, 2.0, np.inf]), np.array([1.0, 2.0, np.inf, np.inf, 5.0])
    pooled = np.concatenate([a, b])
    ranks = sw.midranks(pooled)
    np.testing.assert_allclose(ranks, [1, 4, 4, 8, 2, 4, 8, 8, 6])
    center = len(a) * (len(pooled) + 1) / 2
    observed = abs(ranks[: len(a)].sum() - center)
    sums = [ranks[list(idx)].sum() for idx in itertools.combinations(range(len(pooled)), len(a))]
    expected = np.mean([abs(s - center) >= observed - 1e-9 for s in sums])
    assert sw.mann_whitney(a, b, "exact")["p"] == pytest.approx(expected, abs=1e-12)


def test_mann_whitney_agrees_with_scipy():
    scipy_stats = pytest.importorskip("scipy.stats", reason="scipy (a dependency of scikit-learn) is not installed")
    rng = np.random.default_rng(3)
    for n1, n2, shift in ((7, 9, 0.4), (9, 20, 1.0), (20, 20, 0.8), (3, 12, 0.0)):
        a, b = rng.normal(size=n1), rng.normal(size=n2) + shift  # continuous: no ties
        for method in ("exact", "asymptotic"):
            ours, ref = sw.mann_whitney(a, b, method), scipy_stats.mannwhitneyu(a, b, method=method)
            assert ours["U"] == pytest.approx(ref.statistic) and ours["p"] == pytest.approx(ref.pvalue, rel=1e-9)
    a = np.r_[rng.integers(0, 5, 12), np.inf, np.inf]  # ties and "never" (+inf), as steps to 10 %
    b = np.r_[rng.integers(2, 7, 15), np.inf]
    ours, ref = sw.mann_whitney(a, b, "asymptotic"), scipy_stats.mannwhitneyu(a, b, method="asymptotic")
    assert ours["U"] == pytest.approx(ref.statistic) and ours["p"] == pytest.approx(ref.pvalue, rel=1e-9)
    np.testing.assert_allclose(sw.midranks(a), scipy_stats.rankdata(a))


# -- Fisher --------------------------------------------------------------------------------------------------------
def _hypergeometric_two_sided(a, b, c, d):
    r1, c1, n = a + b, a + c, a + b + c + d
    pmf = {
        x: math.comb(c1, x) * math.comb(n - c1, r1 - x) / math.comb(n, r1)
        for x in range(max(0, r1 + c1 - n), min(r1, c1) + 1)
    }
    return sum(p for p in pmf.values() if p <= pmf[a] * (1 + 1e-12))


def test_fisher_exact_is_the_hypergeometric_sum():
    # [[3, 1], [1, 3]]: margins 4/4 of 8, pmf over x = 0..4 is (1, 16, 36, 16, 1)/70; p = 34/70
    assert sw.fisher_exact([[3, 1], [1, 3]]) == pytest.approx(34 / 70)
    for t in ([[1, 8], [2, 18]], [[2, 7], [9, 11]], [[0, 9], [2, 18]], [[6, 3], [9, 11]], [[0, 20], [20, 0]]):
        assert sw.fisher_exact(t) == pytest.approx(_hypergeometric_two_sided(*t[0], *t[1]), rel=1e-12)
    assert sw.fisher_exact([[0, 20], [20, 0]]) == pytest.approx(2 / math.comb(40, 20))
    with pytest.raises(ValueError, match="2 x 2"):
        sw.fisher_exact([[1, 2, 3], [4, 5, 6]])


def test_fisher_exact_agrees_with_scipy():
    scipy_stats = pytest.importorskip("scipy.stats", reason="scipy (a dependency of scikit-learn) is not installed")
    for t in ([[1, 8], [2, 18]], [[2, 7], [9, 11]], [[6, 3], [9, 11]], [[1, 8], [6, 3]], [[5, 15], [12, 8]]):
        assert sw.fisher_exact(t) == pytest.approx(scipy_stats.fisher_exact(t).pvalue, rel=1e-9)


# -- calibration ---------------------------------------------------------------------------------------------------
def test_the_permutation_test_and_the_rank_test_are_calibrated():
    """400 pairs of 8 + 8 seeds from one (bimodal, like final errors) distribution: p < 0.05 in about 5 % of draws.
    Binomial(400, 0.05) has mean 20 and SD 4.4; the tolerance [8, 34] is about ±3 SD (a discrete test may sit a
    little below its level, never above it by more than chance)."""
    rng = np.random.default_rng(2026)
    draw = lambda: np.where(rng.random(8) < 0.2, rng.uniform(60, 100, 8), rng.exponential(2.0, 8))  # noqa: E731
    pairs = [(draw(), draw()) for _ in range(400)]
    perm = sum(permutation_test(a, b, n_perm=200, seed=i) < 0.05 for i, (a, b) in enumerate(pairs))
    rank = sum(sw.mann_whitney(a, b)["p"] < 0.05 for a, b in pairs)
    assert 8 <= perm <= 34, perm
    assert 8 <= rank <= 34, rank


# -- the rule ------------------------------------------------------------------------------------------------------
def test_the_rule_on_p_values():
    assert sw.rule(9, 20, 1e-6, 1e-6, 1e-6)[0] == sw.TOO_FEW  # seeds first, whatever the p-values
    assert sw.rule(20, sw.MIN_SEEDS - 1, 0.5, 0.5, 0.5)[0] == sw.TOO_FEW
    assert sw.rule(16, 16, 0.009, 0.9, 0.9)[0] == sw.DIFFERS  # the late phase alone, p < 0.01
    assert sw.rule(20, 20, 0.03, 0.04, 0.9)[0] == sw.DIFFERS  # 0.01 <= p < 0.05, final backs it
    assert sw.rule(20, 20, 0.03, 0.9, 0.02)[0] == sw.DIFFERS  # ... or the never-solved count
    assert sw.rule(20, 20, 0.03, 0.2, 0.2)[0] == sw.CONSISTENT  # nothing backs it
    assert sw.rule(20, 20, 0.2, 1e-4, 1e-4)[0] == sw.CONSISTENT  # the late phase comes first
    assert sw.rule(20, 20, sw.P_WEAK, 0.0, 0.0)[0] == sw.CONSISTENT
    # two methods of one code: the same outcome has its own word, and an unknown word is refused
    assert sw.rule(20, 20, 0.2, 0.2, 0.2, same=sw.NO_DIFFERENCE)[0] == sw.NO_DIFFERENCE
    assert sw.rule(20, 20, 0.009, 0.2, 0.2, same=sw.NO_DIFFERENCE)[0] == sw.DIFFERS
    with pytest.raises(ValueError, match="same"):
        sw.rule(20, 20, 0.2, 0.2, 0.2, same="agrees")


def _seeds(rng, n, stuck, T=200):
    """n curves: most fall to ~0 at a random episode, ``stuck`` of them stay near 90 %."""
    t = np.arange(T)
    c = np.empty((n, T))
    for i in range(n):
        if i < stuck:
            c[i] = np.clip(0.9 + 0.02 * rng.standard_normal(T), 0, 1)
        else:
            c[i] = np.clip(1 / (1 + np.exp((t - rng.integers(20, 80)) / 5)) + 0.005 * rng.random(T), 0, 1)
    return c


def test_the_rules_three_outcomes_on_constructed_curves():
    rng = np.random.default_rng(0)
    few = sw.compare(_seeds(rng, 9, 1), _seeds(rng, 20, 2))
    assert few["verdict"] == sw.TOO_FEW and few["n"] == [9, 20]
    differs = sw.compare(_seeds(rng, 20, 1), _seeds(rng, 20, 12), n_perm=2000)
    assert differs["verdict"] == sw.DIFFERS and differs["statistics"]["late"]["rank_p"] < sw.P_STRONG
    same = sw.compare(_seeds(rng, 20, 2), _seeds(rng, 20, 2), n_perm=2000)
    assert same["verdict"] == sw.CONSISTENT and same["statistics"]["late"]["rank_p"] >= sw.P_WEAK
    st = differs["statistics"]
    assert st["solved"]["table"] == [[1, 19], [12, 8]] and st["steps"]["never_b"] == 12
    assert st["steps"]["b"].count(None) == 12 and st["steps"]["mean_b"] > st["steps"]["mean_a"]
    json.dumps(differs, allow_nan=False)  # plain JSON: summary.json holds it


# -- Table 3, H = 10 -------------------------------------------------------------------------------------------------
def test_h10_on_the_reference_file_and_the_committed_seeds(reference_npz):
    ours, ref = sw.load_h10(ROOT / "results", reference_npz)
    assert ref["tpo"].shape == (20, 2000) and set(ref) == {"tpo", "grpo"}
    out = sw.h10_comparison(ours, ref, n_perm=2000)
    json.dumps(out, allow_nan=False)
    own = out["comparisons"]["reference: tpo vs grpo"]  # the reference's own TPO against its own GRPO
    assert own["verdict"] == sw.DIFFERS and own["statistics"]["late"]["rank_p"] < 0.001
    if "ours: tpo vs grpo" in out["comparisons"]:  # two methods: never called "consistent"
        assert out["comparisons"]["ours: tpo vs grpo"]["verdict"] in (sw.DIFFERS, sw.NO_DIFFERENCE, sw.TOO_FEW)
    o = out["outcomes"]["reference"]
    assert (o["tpo"]["never_solved"], o["grpo"]["never_solved"]) == (2, 9)  # the reference's stuck seeds
    assert o["tpo"]["relapsed"] >= 10 and o["tpo"]["worst_relapse"] > 96
    n_ours = len(ours.get("tpo", []))
    if n_ours:
        c = out["comparisons"]["tpo: ours vs reference"]
        assert c["n"] == [n_ours, 20]
        assert c["verdict"] == (sw.TOO_FEW if n_ours < sw.MIN_SEEDS else c["verdict"])
    # the reference's seeds against themselves: 20 of its TPO seeds split 10 / 10 cannot be judged; all 20 twice
    # are consistent with themselves
    assert sw.compare(ref["tpo"][:10], ref["tpo"][10:], n_perm=500)["verdict"] == sw.TOO_FEW
    assert sw.compare(ref["tpo"], ref["tpo"], n_perm=500)["verdict"] == sw.CONSISTENT


def test_the_report_renders_the_seed_by_seed_comparison():
    from tpo_core.lab import report

    rng = np.random.default_rng(1)
    ours = {"tpo": _seeds(rng, 9, 1), "grpo": _seeds(rng, 9, 5)}
    ref = {"tpo": _seeds(rng, 20, 2), "grpo": _seeds(rng, 20, 9)}
    sw_result = json.loads(json.dumps(sw.h10_comparison(ours, ref, n_perm=500)))  # as read back from summary.json
    assert list(sw_result["comparisons"]) == [
        "tpo: ours vs reference",
        "grpo: ours vs reference",
        "ours: tpo vs grpo",
        "reference: tpo vs grpo",
    ]
    md = "\n".join(report.seedwise_table(sw_result))
    assert "| tpo: ours vs reference | 9 / 20 | late-phase mean error (%) |" in md
    assert "**too few seeds** (9 seeds on one side, fewer than 16)" in md and "(Fisher)" in md
    assert "ours tpo: 1 never solved" in md and "reference grpo: 9 never solved" in md
    summary = dict(
        preset="table3",
        title="Table 3",
        claim="c",
        budget="paper-h10",
        budget_note="n",
        paper_setting="s",
        command="cmd",
        rows=[],
        seedwise=sw_result,
    )
    assert "Seed by seed" in report.to_markdown([summary]) and "Seed by seed" in report.to_html([summary])


def test_the_seed_by_seed_figure_draws_every_seed_and_survives_a_missing_side():
    from tpo_core.lab.reproduce import figure

    rng = np.random.default_rng(2)
    ours, ref = {"tpo": _seeds(rng, 3, 1), "grpo": _seeds(rng, 2, 1)}, {"tpo": _seeds(rng, 4, 1)}
    fig = figure.seedwise_figure(ours, ref)
    medians = [t.name for t in fig.data if t.name]
    assert medians == [
        "tpo, ours: median of 3 seeds",
        "tpo, reference: median of 4 seeds",
        "grpo, ours: median of 2 seeds",
    ]
    dots = [t for t in fig.data if t.mode == "markers"]
    np.testing.assert_allclose(dots[0].y, sw.per_seed(ours["tpo"])["final"])
    assert [len(d.y) for d in dots] == [3, 4, 2]
    assert len([t for t in fig.data if t.mode == "lines" and not t.name and t.opacity == 0.35]) == 3 + 4 + 2
    assert len(figure.seedwise_figure({}, ref).data) > 0 and len(figure.seedwise_figure(ours, {}).data) > 0


def test_table3_h7_runs_get_the_tpo_vs_grpo_comparison_and_the_report_titles_it():
    """The H = 7 column at the paper's setting: TPO against GRPO within ours, seed by seed (no reference curves)."""
    from tpo_core.lab import report
    from tpo_core.lab.reproduce import presets

    preset = presets.PRESETS["table3"]
    runs, _ = preset.runs("paper-h7")
    rng = np.random.default_rng(3)
    curves = {r.key: {"error": _seeds(rng, 16, 1 if r.method == "tpo" else 9)} for r in runs}
    extra = json.loads(json.dumps(preset.extras(preset, runs, curves, [])))
    assert set(extra) == {"seedwise_h7"}  # no H = 10 run: no reference comparison
    assert list(extra["seedwise_h7"]["comparisons"]) == ["ours: tpo vs grpo"]
    want = sw.compare(curves["tpo H=7 P"]["error"], curves["grpo H=7 P"]["error"], ("tpo", "grpo"), sw.N_PERM)
    got = extra["seedwise_h7"]["comparisons"]["ours: tpo vs grpo"]
    assert got["statistics"]["late"]["rank_p"] == pytest.approx(want["statistics"]["late"]["rank_p"])
    assert "Seed by seed at H = 7" in "\n".join(report.seedwise_table(extra["seedwise_h7"], "H = 7"))
