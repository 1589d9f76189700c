"""Reproduction presets, the paper comparison and the report (issue #3).

Every preset runs at its ``smoke`` budget in-process (tiny tasks; identical configurations across presets
share one compiled program); one CLI subprocess test covers exit codes, atomic writes and resuming.
"""
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tpo_core import experiments as X
from tpo_core import report, train

ROOT = pathlib.Path(__file__).resolve().parents[1]
REFERENCE = report.default_reference_path()


@pytest.fixture(scope="module", autouse=True)
def _compile_cache():
    train.enable_compile_cache()


@pytest.fixture(scope="module")
def dataset():
    from tpo_core import mnist
    return mnist.load()


# ---------------------------------------------------------------------------------------------
# metrics and comparison, on hand-made curves
# ---------------------------------------------------------------------------------------------
def test_steps_to_uses_the_seed_mean_and_is_zero_based():
    curves = np.array([[0.5, 0.02, 0.0, 0.0],
                       [0.5, 0.00, 0.03, 0.0]])   # mean: 0.5, 0.01, 0.015, 0.0
    assert X.steps_to(curves) == 3               # 0.01 is not < 0.01
    assert X.steps_to(curves, threshold=0.0101) == 1
    assert X.steps_to(np.full((2, 5), 0.2)) is None


def test_measure_final_error_in_percent_with_seed_se():
    curves = np.array([[0.9, 0.10], [0.9, 0.30], [0.9, 0.20]])
    m = X.measure(curves, "final_error")
    assert m["value"] == pytest.approx(20.0)
    assert m["se"] == pytest.approx(10.0 / np.sqrt(3))   # sample std of (10, 30, 20) is 10
    assert m["per_seed"] == pytest.approx([10.0, 30.0, 20.0])
    assert np.isnan(X.measure(curves[:1], "final_error")["se"])
    with pytest.raises(ValueError, match="metric"):
        X.measure(curves, "median")


def test_measure_steps_bootstrap_se_is_zero_when_seeds_agree_and_positive_when_not():
    same = np.tile(np.array([0.5, 0.2, 0.0, 0.0]), (4, 1))
    assert X.measure(same, "steps_to_1pct")["value"] == 2
    assert X.measure(same, "steps_to_1pct")["se"] == 0.0
    spread = np.array([[0.5, 0.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.0, 0.0]])
    assert X.measure(spread, "steps_to_1pct")["se"] > 0


@pytest.mark.parametrize("value,se,paper,metric,expected", [
    (7.0, 2.0, 7.4, "final_error", True),
    (20.0, 2.0, 7.4, "final_error", False),
    (97.0, 1.0, X.NEVER, "final_error", True),       # "−" = above 95 %
    (50.0, 5.0, X.NEVER, "final_error", False),
    (None, 3.0, X.NEVER, "steps_to_1pct", True),     # never reached, as the paper
    (120, 10.0, X.NEVER, "steps_to_1pct", False),
    (None, 3.0, 58, "steps_to_1pct", False),
    (60, 5.0, 58, "steps_to_1pct", True),
    (1.0, 0.5, ("<", 2.3), "final_error", True),
    (5.0, 0.5, ("<", 2.3), "final_error", False),
    (99.5, 0.1, (">", 99.0), "final_error", True),
    (7.0, float("nan"), 7.4, "final_error", None),   # one seed: no SE, no verdict
    (7.0, 1.0, None, "final_error", None),
])
def test_compare_within_two_standard_errors(value, se, paper, metric, expected):
    assert X.compare(value, se, paper, metric) is expected


def test_presets_cover_the_paper_and_know_its_numbers():
    assert set(X.PRESETS) == {"mnist", "table1", "table2", "table3", "anchor", "k_sweep", "epoch_sweep",
                              "grpo_masked", "eta_sweep", "dapo", "std_noise"}
    runs, _ = X.get("table3").runs("paper")
    assert len(runs) == 40 and all(r.seeds == tuple(range(20)) and r.cfg.episodes == 2000 for r in runs)
    by_key = {r.key: r for r in runs}
    assert by_key["ppo H=10 I"].cfg.B == 800 and by_key["ppo H=10 P"].cfg.B == 100
    assert by_key["tpo H=10 I"].cfg == by_key["tpo H=10 P"].cfg          # group methods: I == P
    p = X.get("table3").paper
    assert p(by_key["tpo H=10 P"].label, "final_error") == 7.4
    assert p(by_key["grpo H=9 I"].label, "final_error") == 36.2
    assert p(by_key["dg H=10 P"].label, "final_error") == X.NEVER
    t1, _ = X.get("table1").runs("paper")
    assert {(r.method, r.cfg.V) for r in t1} == set(X.TABLE1_PAPER)
    assert X.get("table1").paper(dict(method="grpo_token", V=2), "steps_to_1pct") == 904
    mn, _ = X.get("mnist").runs("paper")
    assert [r.method for r in mn] == list(X.MNIST_METHODS) and mn[0].cfg.steps == 10_000 and len(mn[0].seeds) == 20
    ks, _ = X.get("k_sweep").runs("paper")
    assert {r.cfg.K for r in ks} == {4, 8, 16, 32, 64} and all(r.cfg.H == 8 and r.cfg.B == 256 for r in ks)
    for name, preset in X.PRESETS.items():
        for budget in X.BUDGETS:
            runs, note = preset.runs(budget)
            assert runs and note, (name, budget)
            assert len({r.key for r in runs}) == len(runs), (name, budget)


def test_bad_names_and_budgets_raise_value_errors_naming_them():
    with pytest.raises(ValueError, match="preset"):
        X.get("table9")
    with pytest.raises(ValueError, match="budget"):
        X.get("table3").runs("huge")


def test_padded_seeds_fill_every_device():
    assert X.padded_seeds([0, 1, 2], 2) == [0, 1, 2, 3]
    assert X.padded_seeds([0, 1], 2) == [0, 1]
    assert X.padded_seeds([5], 4) == [5, 6, 7, 8]
    assert X.padded_seeds([0, 1, 2], 1) == [0, 1, 2]


def test_config_hash_changes_with_config_and_seeds():
    r = X.get("table3").runs("smoke")[0][0]
    same = X.Run("other name", r.cfg, r.seeds)
    assert same.config_hash() == r.config_hash()
    assert X.Run(r.key, r.cfg.replace(lr=2e-3), r.seeds).config_hash() != r.config_hash()
    assert X.Run(r.key, r.cfg, (0, 1)).config_hash() != r.config_hash()


# ---------------------------------------------------------------------------------------------
# every preset at its smoke budget
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(X.PRESETS))
def test_every_preset_runs_at_smoke_budget(name, tmp_path, dataset):
    preset = X.get(name)
    runs, _ = preset.runs("smoke")
    summary = X.run_preset(name, "smoke", tmp_path, progress=False, dataset=dataset, log=lambda m: None)
    assert len(summary["rows"]) == len(runs) * len(preset.metrics)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["preset"] == name and saved["budget"] == "smoke" and not saved["comparable"]
    for run in runs:
        with np.load(tmp_path / run.filename) as f:
            assert str(f["config_hash"]) == run.config_hash()
            curve = f["curve_" + X.primary_curve(run)]
        assert curve.shape == (len(run.seeds), run.length)
        assert np.all((curve >= 0) & (curve <= 1))
    for row in saved["rows"]:
        assert row["paper_text"] == X.paper_text(preset.paper(row["labels"], row["metric"]))
    html = (tmp_path / "figure.html").read_text()
    assert "<script" in html and not re.search(r"<script[^>]*\ssrc=", html)   # no external script
    assert len(html) > 1_000_000                                                # plotly.js inlined
    assert not list(tmp_path.glob(".*.tmp"))


def test_resume_skips_finished_runs_and_retrains_a_stale_one(tmp_path, dataset):
    X.run_preset("anchor", "smoke", tmp_path, progress=False, log=lambda m: None)
    runs, _ = X.get("anchor").runs("smoke")
    stale = tmp_path / runs[1].filename
    with np.load(stale) as f:
        arrays = dict(f)
    arrays["config_hash"] = np.array("0" * 16)            # as if written for another configuration
    np.savez(stale, **arrays)
    before = {r.filename: (tmp_path / r.filename).stat().st_mtime_ns for r in runs}
    messages = []
    summary = X.run_preset("anchor", "smoke", tmp_path, progress=False, log=messages.append)
    skipped = [m for m in messages if "skipped" in m]
    assert len(skipped) == len(runs) - 1 and runs[1].key not in " ".join(skipped)
    after = {r.filename: (tmp_path / r.filename).stat().st_mtime_ns for r in runs}
    assert after[runs[0].filename] == before[runs[0].filename]
    assert after[runs[1].filename] != before[runs[1].filename]
    with np.load(stale) as f:
        assert str(f["config_hash"]) == runs[1].config_hash()
    assert summary["train_seconds"] > 0


def test_std_noise_hook_changes_training_only_when_on():
    from tpo_core.config import TokenConfig
    base = TokenConfig(method="tpo", H=3, B=4, K=4, episodes=4, track=0, **X.SMOKE_MODEL)
    with pytest.raises(ValueError, match="reward_noise"):
        base.replace(reward_noise=-0.1)
    clean = train.train_tokens(base, seeds=(0,))
    zero = train.train_tokens(base.replace(reward_noise=0.0), seeds=(0,))
    noisy = train.train_tokens(base.replace(reward_noise=0.5), seeds=(0,))
    np.testing.assert_array_equal(clean["loss"], zero["loss"])
    assert clean["error"][0, 0] == noisy["error"][0, 0]          # same rollout before any update
    assert not np.allclose(clean["loss"], noisy["loss"])         # the method saw different scores


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def _fake_summary(preset="table3", budget="paper"):
    rows = [dict(key="tpo H=10 P", method="tpo", labels=dict(method="tpo", H=10, setting="P"), metric="final_error",
                 ours=7.1, se=2.0, per_seed=[], paper=7.4, paper_text="7.4", agree=True, seeds=list(range(20)),
                 length=2000),
            dict(key="grpo H=10 P", method="grpo", labels=dict(method="grpo", H=10, setting="P"), metric="final_error",
                 ours=12.0, se=1.0, per_seed=[], paper=50.4, paper_text="50.4", agree=False, seeds=list(range(20)),
                 length=2000)]
    return dict(preset=preset, title="Table 3", claim="claim text", budget=budget, budget_note="note",
                paper_setting="setting", comparable=budget == "paper", command="python -m tpo_core reproduce table3",
                rows=rows, devices=1, train_seconds=1.0)


def test_report_markdown_and_html_show_ours_se_paper_and_verdict(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "summary.json").write_text(json.dumps(_fake_summary()))
    (tmp_path / "a" / "NOTES.md").write_text("GRPO differs: see seeds.\n")
    summaries = report.load_summaries(tmp_path)
    md = report.to_markdown(summaries)
    assert "| tpo H=10 P | final error (%) | 7.10 ± 2.00 | 7.4 | yes |" in md
    assert "| grpo H=10 P | final error (%) | 12.00 ± 1.00 | 50.4 | **no** |" in md
    assert "1 of 2 rows" in md and "**Findings.** GRPO differs: see seeds." in md
    html = report.to_html(summaries)
    assert html.startswith("<!DOCTYPE html>") and "<td class='no'>no</td>" in html and "50.4" in html
    with pytest.raises(ValueError, match="does not exist"):
        report.load_summaries(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no summary.json"):
        report.load_summaries(tmp_path / "empty")


@pytest.mark.skipif(not REFERENCE.exists(), reason="reference curves not beside the repository")
def test_compare_reference_accepts_its_own_seeds_and_rejects_grpo_as_tpo():
    ref = report.load_reference(REFERENCE)
    assert ref["tpo"].shape == (20, 2000)
    assert ref["tpo"][:, -1].mean() == pytest.approx(0.0736, abs=1e-3)      # the README's 7.36 %
    same = report.compare_reference({"tpo": ref["tpo"][:10]}, REFERENCE)
    assert same["methods"]["tpo"]["verdict"] == "consistent"
    assert [c["episode"] for c in same["methods"]["tpo"]["checkpoints"]] == list(report.CHECKPOINTS)
    wrong = report.compare_reference({"tpo": ref["grpo"]}, REFERENCE)
    assert wrong["methods"]["tpo"]["verdict"] == "different" and wrong["methods"]["tpo"]["p_value"] < 0.05
    assert wrong["methods"]["tpo"]["solved_ref"] == pytest.approx((ref["tpo"][:, -1] < 0.01).mean())
    short = report.compare_reference({"grpo": ref["grpo"][:, :600]}, REFERENCE)     # a shorter run of ours
    cps = short["methods"]["grpo"]["checkpoints"]
    assert cps[1]["ours"] is not None and cps[2]["ours"] is None
    assert short["methods"]["grpo"]["final_ref"] == pytest.approx(ref["grpo"][:, 599].mean())
    with pytest.raises(ValueError, match="no method in common"):
        report.compare_reference({"ppo": ref["tpo"]}, REFERENCE)


# ---------------------------------------------------------------------------------------------
# the command line: exit codes, atomic writes, resume after an interruption
# ---------------------------------------------------------------------------------------------
def _cli(*args, **kw):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "tpo_core", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600, **kw)


def test_cli_bad_input_exits_2_with_one_line(tmp_path):
    for args in (["reproduce", "table9"], ["reproduce", "mnist", "--budget", "huge"], ["reproduce"],
                 ["report", str(tmp_path)], ["report", str(tmp_path), "--out", "x.txt"]):
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:"), (args, r.stderr)
    listing = _cli("reproduce", "--list")
    assert listing.returncode == 0 and all(name in listing.stdout for name in X.PRESETS)


def test_cli_interrupted_run_leaves_no_partial_file_and_resumes(tmp_path):
    out = tmp_path / "mnist"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "tpo_core", "reproduce", "mnist", "--budget", "smoke",
                             "--out", str(out), "--quiet"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not list(out.glob("*.npz")) and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the run finished before it could be interrupted")
    assert proc.returncode == 130, err
    finished = sorted(p.name for p in out.glob("*.npz"))
    assert finished and not (out / "summary.json").exists()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]          # no half-written file
    r = _cli("reproduce", "mnist", "--budget", "smoke", "--out", str(out), "--quiet")
    assert r.returncode == 0, r.stderr
    assert sum("skipped" in line for line in r.stderr.splitlines()) >= len(finished)
    assert (out / "summary.json").exists() and (out / "figure.html").exists()
    assert "| tpo | final greedy test error (%)" in r.stdout
    rep = _cli("report", str(tmp_path), "--out", str(tmp_path / "REPORT.md"))
    assert rep.returncode == 0 and "MNIST contextual bandit" in (tmp_path / "REPORT.md").read_text()
