"""Reproduction presets, statistics and verdicts, the reference curves, the resumable runner and the report.

Every preset runs at its ``smoke`` budget in-process (tiny tasks; identical configurations across presets
share one compiled program); CLI subprocess tests cover exit codes, atomic writes and resuming after a kill.
"""

import hashlib
import http.server
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

from tpo_core import train
from tpo_core.config import TokenConfig
from tpo_core.lab import report
from tpo_core.lab.reproduce import paper_numbers as P
from tpo_core.lab.reproduce import presets, reference, runner, stats
from tpo_core.lab.reproduce.presets import PRESETS, Run, get

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dataset():
    from tpo_core.lab import mnist

    return mnist.load()


# ---------------------------------------------------------------------------------------------
# metrics and comparison, on hand-made curves
# ---------------------------------------------------------------------------------------------
def test_steps_to_uses_the_seed_mean_and_is_zero_based():
    curves = np.array([[0.5, 0.02, 0.0, 0.0], [0.5, 0.00, 0.03, 0.0]])  # mean: 0.5, 0.01, 0.015, 0.0
    assert stats.steps_to(curves) == 3  # 0.01 is not < 0.01
    assert stats.steps_to(curves, threshold=0.0101) == 1
    assert stats.steps_to(np.full((2, 5), 0.2)) is None


def test_measure_final_error_in_percent_with_seed_se():
    curves = np.array([[0.9, 0.10], [0.9, 0.30], [0.9, 0.20]])
    m = stats.measure(curves, "final_error")
    assert m["value"] == pytest.approx(20.0)
    assert m["se"] == pytest.approx(10.0 / np.sqrt(3))  # sample std of (10, 30, 20) is 10
    assert m["per_seed"] == pytest.approx([10.0, 30.0, 20.0])
    assert np.isnan(stats.measure(curves[:1], "final_error")["se"])
    with pytest.raises(ValueError, match="metric"):
        stats.measure(curves, "median")


def test_measure_steps_bootstrap_se_is_zero_when_seeds_agree_and_positive_when_not():
    same = np.tile(np.array([0.5, 0.2, 0.0, 0.0]), (4, 1))
    assert stats.measure(same, "steps_to_1pct")["value"] == 2
    assert stats.measure(same, "steps_to_1pct")["se"] == 0.0
    spread = np.array([[0.5, 0.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.0, 0.0]])
    assert stats.measure(spread, "steps_to_1pct")["se"] > 0


@pytest.mark.parametrize(
    "value,se,target,delta,target_se,expected",
    [
        (7.0, 2.0, 7.4, 10.0, 0.0, "consistent"),  # CI of the difference [−4.3, 3.5] inside ±10
        (45.0, 2.0, 7.4, 10.0, 0.0, "inconsistent"),  # 37.6 away, CI excludes 0
        (7.0, 2.0, 7.4, 10.0, 4.0, "consistent"),  # the paper's SE widens it to ±8.8: still inside
        (7.0, 6.0, 7.4, 10.0, 4.0, "inconclusive"),  # ±14.1: too wide to say
        (20.0, 2.0, 7.4, 10.0, 0.0, "inconclusive"),  # differs (CI [8.7, 16.5] excludes 0) but not surely by > δ
        (30.0, 2.0, 7.4, 10.0, 0.0, "inconsistent"),  # CI [18.7, 26.5]: entirely beyond δ
        (97.0, 1.0, P.NEVER, 10.0, 0.0, "consistent"),  # "−" = above 95 %
        (50.0, 5.0, P.NEVER, 10.0, 0.0, "inconsistent"),
        (1.0, 0.5, ("<", 2.3), 1.0, 0.0, "consistent"),
        (5.0, 0.5, ("<", 2.3), 1.0, 0.0, "inconsistent"),
        (2.0, 1.0, ("<", 2.3), 1.0, 0.0, "inconclusive"),
        (99.5, 0.1, (">", 99.0), 1.0, 0.0, "consistent"),
        (7.0, float("nan"), 7.4, 10.0, 0.0, None),  # one seed: no SE, no verdict
        (7.0, 1.0, None, 10.0, 0.0, None),
    ],
)
def test_verdict_can_agree_disagree_or_say_inconclusive(value, se, target, delta, target_se, expected):
    assert stats.verdict(value, se, target, delta, target_se) == expected


def test_the_old_two_se_rule_case_is_now_inconclusive():
    """GRPO 49.75 ± 49.25 (2 seeds) against the paper's 50.4 ± 9.9 "agreed" under "within 2 SE"."""
    assert stats.verdict(49.75, 49.25, 50.4, 21.5, 9.93) == "inconclusive"


def test_steps_verdict_on_never():
    assert stats.steps_verdict(None, P.NEVER, 1000) == "consistent"
    assert stats.steps_verdict(120, P.NEVER, 1000) == "inconsistent"
    assert stats.steps_verdict(None, 58, 1000) == "inconsistent"
    assert stats.steps_verdict(60, 58, 1000) is None  # both numbers: the interval rule decides


def test_permutation_test_and_bootstrap_ci_on_synthetic_samples():
    a = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    assert stats.permutation_test(a, a.copy()) == pytest.approx(1.0)  # identical samples: every relabeling ties
    far = stats.permutation_test(a, a + 100.0, n_perm=5000)
    assert far < 0.02  # only the 2 of C(10,5)=252 extreme splits are as extreme
    lo, hi = stats.bootstrap_diff_ci(a + 10.0, a)
    assert lo <= 10.0 <= hi and 7.0 < lo and hi < 13.0
    rng = np.random.default_rng(1)
    clear_same = stats.two_sample_verdict(rng.normal(5, 1, 40), rng.normal(5, 1, 40), resolution=2.0)
    clear_diff = stats.two_sample_verdict(rng.normal(5, 1, 40), rng.normal(15, 1, 40), resolution=2.0)
    unclear = stats.two_sample_verdict(rng.normal(5, 20, 3), rng.normal(5, 20, 3), resolution=2.0)
    assert (clear_same["verdict"], clear_diff["verdict"], unclear["verdict"]) == (
        "consistent",
        "inconsistent",
        "inconclusive",
    )
    assert stats.two_sample_verdict([1.0], [1.0, 2.0], 1.0)["verdict"] == "inconclusive"


def test_seed_se_and_per_seed_steps():
    assert stats.seed_se([10.0, 30.0, 20.0]) == pytest.approx(10.0 / np.sqrt(3))
    assert np.isnan(stats.seed_se([1.0]))
    c = np.array([[0.5, 0.05, 0.0], [0.5, 0.5, 0.5]])
    np.testing.assert_array_equal(stats.per_seed_steps_to(c, 0.1), [1, 3])  # never: censored at T = 3


def test_presets_cover_the_paper_and_know_its_numbers():
    assert set(PRESETS) == {
        "mnist",
        "table1",
        "table2",
        "table3",
        "anchor",
        "k_sweep",
        "epoch_sweep",
        "grpo_masked",
        "eta_sweep",
        "dapo",
        "std_noise",
    }
    runs, _ = get("table3").runs("paper")
    assert len(runs) == 40 and all(r.seeds == tuple(range(20)) and r.cfg.episodes == 2000 for r in runs)
    by_key = {r.key: r for r in runs}
    assert by_key["ppo H=10 I"].cfg.B == 800 and by_key["ppo H=10 P"].cfg.B == 100
    assert by_key["tpo H=10 I"].cfg == by_key["tpo H=10 P"].cfg  # group methods: I == P
    p = get("table3").paper
    assert p(by_key["tpo H=10 P"].label, "final_error") == 7.4
    assert p(by_key["grpo H=9 I"].label, "final_error") == 36.2
    assert p(by_key["dg H=10 P"].label, "final_error") == P.NEVER
    assert p(dict(method="tpo", H=6, setting="P"), "final_error") is None  # no clamping to another H
    assert P.TABLE3[("tpo", 7, "I")] == 1.8 and P.TABLE3[("grpo", 10, "I")] == 48.7
    t1, _ = get("table1").runs("paper")
    assert {(r.method, r.cfg.V) for r in t1} == set(P.TABLE1)
    assert get("table1").paper(dict(method="grpo_token", V=2), "steps_to_1pct") == 904
    mn, _ = get("mnist").runs("paper")
    assert (
        [r.method for r in mn] == list(presets.MNIST_METHODS) and mn[0].cfg.steps == 10_000 and len(mn[0].seeds) == 20
    )
    ks, _ = get("k_sweep").runs("paper")
    assert {r.cfg.K for r in ks} == {4, 8, 16, 32, 64} and all(r.cfg.H == 8 and r.cfg.B == 256 for r in ks)
    for name, preset in PRESETS.items():
        for budget in preset.budgets:
            runs, note = preset.runs(budget)
            assert runs and note, (name, budget)
            assert len({r.key for r in runs}) == len(runs), (name, budget)


def test_only_the_papers_own_setting_is_comparable():
    t3 = get("table3")
    h10 = {r.key: r for r in t3.runs("paper-h10")[0]}
    assert set(h10) == {"tpo H=10 P", "grpo H=10 P"} and all(
        r.seed_batch == 1 and len(r.seeds) == 20 for r in h10.values()
    )
    assert all(t3.comparable(r) for r in h10.values())
    assert all(t3.comparable(r) for r in t3.runs("paper-h7")[0])
    assert not any(t3.comparable(r) for b in ("smoke", "cpu") for r in t3.runs(b)[0])
    fewer_episodes = Run("tpo H=10 P", h10["tpo H=10 P"].cfg.replace(episodes=1000), (0,))
    assert not t3.comparable(fewer_episodes)
    assert t3.resolution(dict(H=10, setting="P"), "final_error") == pytest.approx((50.4 - 7.4) / 2)


def test_paper_tables_are_rendered_from_the_one_copy():
    md = report.paper_tables_markdown()
    assert "| TPO | 6.9 | 8.6 | 6.1 | 7.4 | 1.8 | 2.8 | 5.3 | 19.0 |" in md
    assert "| GRPO (no KL) | 66.6 | 92.5 | − | − | 78.1 | 83.8 | − | − |" in md
    assert "| TPO_token | 58 | 74 | 103 | 102 |" in md
    assert "| bag | reverse copy | 55 | 352 | 202 | − |" in md
    from demos import paper

    assert paper.PAPER_TABLES == md


def test_a_number_read_off_a_figure_is_labelled_so_wherever_it_is_shown():
    from tpo_core.lab.reproduce import paper_numbers as P

    assert P.MNIST_READ_OFF_FIGURE == {"dg"}  # the paper's text gives no final error for DG (§3.3)
    assert P.mnist_text("dg") == "≈ 3.2 % (read off Fig. 4)" and P.mnist_text("tpo") == "2.9 %"
    assert "DG ≈ 3.2 % (read off Fig. 4)" in report.paper_tables_markdown()
    assert "DG ≈ 3.2% (read off Fig. 4)" in PRESETS["mnist"].claim


def test_bad_names_and_budgets_raise_value_errors_naming_them():
    with pytest.raises(ValueError, match="preset"):
        get("table9")
    with pytest.raises(ValueError, match="budget"):
        get("table3").runs("huge")
    with pytest.raises(ValueError, match="budget"):
        get("mnist").runs("paper-h10")  # Table 3's budget only


def test_padded_seeds_fill_every_device():
    assert runner.padded_seeds([0, 1, 2], 2) == [0, 1, 2, 3]
    assert runner.padded_seeds([0, 1], 2) == [0, 1]
    assert runner.padded_seeds([5], 4) == [5, 6, 7, 8]
    assert runner.padded_seeds([0, 1, 2], 1) == [0, 1, 2]


def test_config_hash_changes_with_config_and_seeds():
    r = get("table3").runs("smoke")[0][0]
    same = Run("other name", r.cfg, r.seeds)
    assert same.config_hash() == r.config_hash()
    assert Run(r.key, r.cfg.replace(lr=2e-3), r.seeds).config_hash() != r.config_hash()
    assert Run(r.key, r.cfg, (0, 1)).config_hash() != r.config_hash()
    assert Run(r.key, r.cfg, (0, 1)).seed_hash(0) == Run(r.key, r.cfg, (0, 1, 2)).seed_hash(0)  # seeds reusable
    assert r.seed_hash(0) != r.seed_hash(1)


# ---------------------------------------------------------------------------------------------
# every preset at its smoke budget
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_runs_at_smoke_budget(name, tmp_path, dataset):
    preset = get(name)
    runs, _ = preset.runs("smoke")
    summary = runner.run_preset(name, "smoke", tmp_path, progress=False, dataset=dataset, log=lambda m: None)
    assert len(summary["rows"]) == len(runs) * len(preset.metrics)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["preset"] == name and saved["budget"] == "smoke"
    for run in runs:
        with np.load(tmp_path / run.filename) as f:
            assert str(f["config_hash"]) == run.config_hash()
            curve = f["curve_" + run.primary]
        assert curve.shape == (len(run.seeds), run.length)
        assert np.all((curve >= 0) & (curve <= 1))
    for row in saved["rows"]:  # smoke is never the paper's setting: nothing is scored
        assert not row["comparable"] and row["verdict"] is None
        assert row["paper_text"] == "no paper number at this setting"
    html = (tmp_path / "figure.html").read_text()
    assert "<script" in html and not re.search(r"<script[^>]*\ssrc=", html)  # no external script
    assert len(html) > 1_000_000  # plotly.js inlined
    assert not list(tmp_path.glob(".*.tmp"))


def test_an_eta_sweep_preset_trains_as_one_program(tmp_path):
    calls = []
    real = runner.execute

    def spy(group, *a, **k):
        calls.append([r.key for r in group])
        return real(group, *a, **k)

    runner.execute = spy
    try:
        runner.run_preset("eta_sweep", "smoke", tmp_path, progress=False, log=lambda m: None)
    finally:
        runner.execute = real
    assert calls == [["tpo_token eta=0.5", "tpo_token eta=2"]]


def test_resume_skips_finished_runs_and_retrains_a_stale_one(tmp_path, dataset):
    runner.run_preset("anchor", "smoke", tmp_path, progress=False, log=lambda m: None)
    runs, _ = get("anchor").runs("smoke")
    stale = tmp_path / runs[1].filename
    with np.load(stale) as f:
        arrays = dict(f)
    arrays["config_hash"] = np.array("0" * 16)  # as if written for another configuration
    np.savez(stale, **arrays)
    before = {r.filename: (tmp_path / r.filename).stat().st_mtime_ns for r in runs}
    messages = []
    summary = runner.run_preset("anchor", "smoke", tmp_path, progress=False, log=messages.append)
    skipped = [m for m in messages if "skipped" in m]
    assert len(skipped) == len(runs) - 1 and runs[1].key not in " ".join(skipped)
    after = {r.filename: (tmp_path / r.filename).stat().st_mtime_ns for r in runs}
    assert after[runs[0].filename] == before[runs[0].filename]
    assert after[runs[1].filename] != before[runs[1].filename]
    with np.load(stale) as f:
        assert str(f["config_hash"]) == runs[1].config_hash()
    assert summary["train_seconds"] > 0


def test_std_noise_hook_changes_training_only_when_on():
    base = TokenConfig(method="tpo", H=3, B=4, K=4, episodes=4, track=0, **presets.SMOKE_MODEL)
    with pytest.raises(ValueError, match="reward_noise"):
        base.replace(reward_noise=-0.1)
    clean = train.train_tokens(base, seeds=(0,))
    zero = train.train_tokens(base.replace(reward_noise=0.0), seeds=(0,))
    noisy = train.train_tokens(base.replace(reward_noise=0.5), seeds=(0,))
    np.testing.assert_array_equal(clean["loss"], zero["loss"])
    assert clean["error"][0, 0] == noisy["error"][0, 0]  # same rollout before any update
    assert not np.allclose(clean["loss"], noisy["loss"])  # the method saw different scores


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def _fake_summary(preset="table3", budget="paper-h10"):
    base = dict(metric="final_error", per_seed=[], seeds=list(range(8)), length=2000, comparable=True, resolution=21.5)
    rows = [
        dict(
            base,
            key="tpo H=10 P",
            method="tpo",
            labels=dict(method="tpo", H=10, setting="P"),
            ours=7.1,
            se=2.0,
            paper=7.4,
            paper_text="7.4",
            paper_se=3.96,
            verdict="consistent",
        ),
        dict(
            base,
            key="grpo H=10 P",
            method="grpo",
            labels=dict(method="grpo", H=10, setting="P"),
            ours=95.0,
            se=1.0,
            paper=50.4,
            paper_text="50.4",
            paper_se=9.93,
            verdict="inconsistent",
        ),
        dict(
            base,
            key="tpo H=6 P",
            method="tpo",
            labels=dict(method="tpo", H=6, setting="P"),
            ours=1.0,
            se=1.0,
            paper=None,
            paper_text="no paper number at this setting",
            paper_se=None,
            verdict=None,
            comparable=False,
        ),
    ]
    return dict(
        preset=preset,
        title="Table 3",
        claim="claim text",
        budget=budget,
        budget_note="note",
        paper_setting="setting",
        command="python -m tpo_core reproduce table3",
        rows=rows,
        devices=1,
        train_seconds=1.0,
    )


def test_report_markdown_and_html_show_ours_paper_both_ses_and_the_verdict(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "summary.json").write_text(json.dumps(_fake_summary()))
    (tmp_path / "a" / "NOTES.md").write_text("GRPO differs: see seeds.\n")
    summaries = report.load_summaries(tmp_path)
    md = report.to_markdown(summaries)
    assert "| tpo H=10 P | final error (%) | 7.10 ± 2.00 | 7.4 ± 3.96 | 21.5 | consistent | 8 × 2000 |" in md
    assert "| grpo H=10 P | final error (%) | 95.00 ± 1.00 | 50.4 ± 9.93 | 21.5 | inconsistent |" in md
    assert "| tpo H=6 P | final error (%) | 1.00 ± 1.00 | no paper number at this setting |  | — |" in md
    assert "2 ran at the paper's own setting" in md and "1 consistent, 1 inconsistent, 0 inconclusive" in md
    assert "**Findings.** GRPO differs: see seeds." in md and "within 2 SE" not in md
    html = report.to_html(summaries)
    assert html.startswith("<!DOCTYPE html>") and "<td class='inconsistent'>inconsistent</td>" in html
    with pytest.raises(ValueError, match="does not exist"):
        report.load_summaries(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no summary.json"):
        report.load_summaries(tmp_path / "empty")


def test_compare_reference_accepts_its_own_seeds_and_rejects_grpo_as_tpo(reference_npz):
    ref = reference.load_reference(reference_npz)
    assert ref["tpo"].shape == (20, 2000)
    assert 100 * ref["tpo"][:, -1].mean() == pytest.approx(P.REFERENCE_FINAL["tpo"], abs=0.01)
    assert reference.sha256(reference_npz) == reference.SHA256
    same = reference.compare_reference({"tpo": ref["tpo"][:15]}, reference_npz)["methods"]["tpo"]
    assert same["final_test"]["verdict"] == "consistent" and same["n_ours"] == 15
    wrong = reference.compare_reference({"tpo": ref["grpo"]}, reference_npz)["methods"]["tpo"]
    assert wrong["final_test"]["verdict"] == "inconsistent" and wrong["final_test"]["p_value"] < 0.01
    few = reference.compare_reference({"grpo": ref["grpo"][:2]}, reference_npz)["methods"]["grpo"]
    assert few["final_test"]["verdict"] == "inconclusive"  # two bimodal seeds cannot resolve 21.5 points
    short = reference.compare_reference({"grpo": ref["grpo"][:, :600]}, reference_npz)["methods"]["grpo"]
    assert short["checkpoints"][1]["ours"] is not None and short["checkpoints"][2]["ours"] is None
    assert not short["comparable"]
    with pytest.raises(ValueError, match="no method in common"):
        reference.compare_reference({"ppo": ref["tpo"]}, reference_npz)


class _Files(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_reference_download_verifies_the_checksum_over_a_local_server(tmp_path, monkeypatch, capsys):
    served = tmp_path / "served"
    served.mkdir()
    payload = b"reference curves stand-in"
    (served / "ref.npz").write_bytes(payload)
    handler = lambda *a, **k: _Files(*a, directory=str(served), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/ref.npz"
    try:
        good = hashlib.sha256(payload).hexdigest()
        assert reference.download(tmp_path / "a" / "ref.npz", url, expected=good)
        assert (tmp_path / "a" / "ref.npz").read_bytes() == payload
        assert not reference.download(tmp_path / "b" / "ref.npz", url, expected="0" * 64)  # wrong checksum
        assert not (tmp_path / "b" / "ref.npz").exists()
        assert not reference.download(tmp_path / "c" / "ref.npz", url.replace("ref.npz", "missing.npz"))
    finally:
        server.shutdown()
    monkeypatch.delenv("TPO_REFERENCE_NPZ", raising=False)
    monkeypatch.setenv("TPO_CACHE_DIR", str(tmp_path / "cache"))
    assert reference.reference_path(url="http://127.0.0.1:9/nothing") is None  # offline: one line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unavailable offline" in err[0]


# ---------------------------------------------------------------------------------------------
# the command line: exit codes, atomic writes, resume after an interruption
# ---------------------------------------------------------------------------------------------
def _cli(*args, **kw):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "tpo_core", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, **kw
    )


def test_cli_bad_input_exits_2_with_one_line(tmp_path):
    for args in (
        ["reproduce", "table9"],
        ["reproduce", "mnist", "--budget", "huge"],
        ["reproduce"],
        ["report", str(tmp_path)],
        ["report", str(tmp_path), "--out", "x.txt"],
    ):
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:"), (args, r.stderr)
    listing = _cli("reproduce", "--list")
    assert listing.returncode == 0 and all(name in listing.stdout for name in PRESETS)
    assert "paper-h10" in listing.stdout


# The CLI in a child process that sends itself a real SIGINT right after its first run file is written (so the
# interruption lands between runs on every machine, not after a timing guess: polling for the first file and then
# signalling raced the remaining smoke runs, which can finish in well under a second with a warm compile cache).
_INTERRUPT_AFTER_FIRST_FILE = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal: a background job inherits SIGINT ignored
from tpo_core.lab import cli
from tpo_core.lab.reproduce import runner
write = runner.write_run_file
def write_then_interrupt(*args, **kwargs):
    write(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGINT)
runner.write_run_file = write_then_interrupt
sys.exit(cli.main(sys.argv[1:]))
"""


def test_cli_interrupted_run_leaves_no_partial_file_and_resumes(tmp_path):
    out = tmp_path / "mnist"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _INTERRUPT_AFTER_FIRST_FILE,
            "reproduce",
            "mnist",
            "--budget",
            "smoke",
            "--out",
            str(out),
            "--quiet",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines()[-1:] == ["interrupted"], proc.stderr
    finished = sorted(p.name for p in out.glob("*.npz"))
    assert len(finished) == 1 and not (out / "summary.json").exists()  # the first run kept, nothing after
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]  # no half-written file
    r = _cli("reproduce", "mnist", "--budget", "smoke", "--out", str(out), "--quiet")
    assert r.returncode == 0, r.stderr
    assert sum("skipped" in line for line in r.stderr.splitlines()) >= len(finished)
    assert (out / "summary.json").exists() and (out / "figure.html").exists()
    assert "| tpo | final greedy test error (%)" in r.stdout
    rep = _cli("report", str(tmp_path), "--out", str(tmp_path / "REPORT.md"))
    assert rep.returncode == 0 and "MNIST contextual bandit" in (tmp_path / "REPORT.md").read_text()


TINY_PRESET = r"""
import sys
from tpo_core import runtime
from tpo_core.config import TokenConfig
runtime.enable_compile_cache()   # the suite's cache ($TPO_JAX_CACHE): the 2nd and 3rd process reuse the 1st's compiles
from tpo_core.lab.reproduce import presets, run_preset
from tpo_core.lab.reproduce.presets import Preset, Run

def build(budget):
    cfg = dict(H=3, B=4, K=4, episodes=40, d_model=16, layers=1, ffn=32, track=0, reward="terminal")
    return [Run(f"{m} H=3", TokenConfig(method=m, **cfg), (0, 1, 2), (("method", m),), seed_batch=1)
            for m in ("tpo", "grpo")], "tiny, one seed at a time"

presets.PRESETS["tiny"] = Preset("tiny", "tiny", "claim", ("final_error",), build, lambda l, m: None, "none")
if sys.argv[2:] == ["kill"]:  # SIGKILL itself mid-way through the third seed: two seed files and a checkpoint on disk
    import os, signal
    from tpo_core.lab.reproduce import runner
    count, write, save = {"files": 0, "saves": 0}, runner.write_run_file, runner.save_checkpoint
    def write_and_count(*args, **kwargs):
        write(*args, **kwargs)
        count["files"] += 1
    def save_then_kill(*args, **kwargs):
        save(*args, **kwargs)
        count["saves"] += count["files"] == 2
        if count["saves"] == 3:   # the third job's third chunk: its checkpoint is written
            os.kill(os.getpid(), signal.SIGKILL)
    runner.write_run_file, runner.save_checkpoint = write_and_count, save_then_kill
run_preset("tiny", "smoke", sys.argv[1], chunk=4, progress=False)
print("DONE")
"""


def test_a_killed_per_seed_run_resumes_without_losing_or_duplicating_a_seed(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    clean = subprocess.run(
        [sys.executable, "-c", TINY_PRESET, str(tmp_path / "clean")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert clean.returncode == 0 and "DONE" in clean.stdout, clean.stderr[-2000:]
    out = tmp_path / "killed"
    killed = subprocess.run(
        [sys.executable, "-c", TINY_PRESET, str(out), "kill"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]  # no cleanup of any kind
    done_before = sorted(str(p.relative_to(out)) for p in out.glob("*.seeds/seed_*.npz"))
    assert done_before == ["grpo_H_3.seeds/seed_0.npz", "tpo_H_3.seeds/seed_0.npz"]
    assert len(list((out / ".checkpoints").glob("*.npz"))) == 1  # the third seed's, at 12 of 40
    # nothing half-written survives: every result or checkpoint file is complete (a SIGKILL during a write
    # can leave only the writer's hidden temporary file, which no reader opens and the resume removes)
    for p in out.rglob("*.npz"):
        with np.load(p) as f:
            assert f.files, p
    again = subprocess.run(
        [sys.executable, "-c", TINY_PRESET, str(out)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "at 12/40" in again.stderr, again.stderr[-2000:]  # the third seed went on from its checkpoint
    files = sorted(str(p.relative_to(out)) for p in out.glob("*.seeds/seed_*.npz"))
    assert files == sorted(f"{m}_H_3.seeds/seed_{s}.npz" for m in ("tpo", "grpo") for s in range(3))
    for f in files:  # the resumed seeds are the seeds an uninterrupted run trains
        with np.load(out / f) as a, np.load(tmp_path / "clean" / f) as b:
            np.testing.assert_array_equal(a["seeds"], b["seeds"])
            np.testing.assert_array_equal(a["curve_loss"], b["curve_loss"])
    for f in done_before:  # finished seeds were not retrained
        assert f in files
    summary = json.loads((out / "summary.json").read_text())
    assert [len(r["seeds"]) for r in summary["rows"]] == [3, 3]
    assert not list((out / ".checkpoints").glob("*.npz")) if (out / ".checkpoints").exists() else True
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]  # the resume cleared any stale temp file


def test_processes_sharing_a_reproduction_with_only_train_their_own_runs_and_the_last_writes_the_summary(
    tmp_path, monkeypatch
):
    cfg = dict(H=3, B=4, K=4, episodes=8, d_model=16, layers=1, ffn=32, track=0, reward="terminal")

    def build(budget):
        return [
            Run(f"{m} H=3", TokenConfig(method=m, **cfg), (0, 1), (("method", m),), seed_batch=1)
            for m in ("tpo", "grpo")
        ], "tiny"

    monkeypatch.setitem(
        PRESETS,
        "tiny_only",
        presets.Preset("tiny_only", "tiny", "claim", ("final_error",), build, lambda lab, met: None, "none"),
    )
    trained = []
    real = runner.execute

    def spy(group, batch, *a, **k):
        trained.append((group[0].key, tuple(batch)))
        return real(group, batch, *a, **k)

    monkeypatch.setattr(runner, "execute", spy)
    messages = []
    first = runner.run_preset(
        "tiny_only", "smoke", tmp_path, chunk=4, progress=False, only=["tpo_H_3"], log=messages.append
    )
    assert first is None and not (tmp_path / "summary.json").exists()
    assert trained == [("tpo H=3", (0,)), ("tpo H=3", (1,))]
    assert any("grpo H=3 seed 0" in m and "no summary" in m for m in messages)
    assert sorted(p.parent.name for p in tmp_path.glob("*.seeds/seed_*.npz")) == ["tpo_H_3.seeds"] * 2
    tpo_files = {p: p.stat().st_mtime_ns for p in tmp_path.glob("tpo_H_3.seeds/*.npz")}
    done = runner.finished_seeds("tiny_only", "smoke", tmp_path)
    assert list(done) == ["tpo H=3"] and done["tpo H=3"][0] == [0, 1]
    assert done["tpo H=3"][1]["error"].shape == (2, 8)
    trained.clear()
    (tmp_path / "tpo_H_3.seeds" / "seed_1.npz").rename(tmp_path / "seed_1.npz")  # as if seed 1 were running
    progress = runner.run_preset("tiny_only", "smoke", tmp_path, progress=False, partial=True, log=messages.append)
    (tmp_path / "seed_1.npz").rename(tmp_path / "tpo_H_3.seeds" / "seed_1.npz")
    assert trained == [] and progress["partial"] is True  # nothing trained, one seed summarised
    assert [(r["key"], r["seeds"]) for r in progress["rows"]] == [("tpo H=3", [0])]
    assert "(in progress: tpo H=3 1 seed so far)" in report.to_markdown([progress])
    with pytest.raises(ValueError, match="partial: .* holds no finished seed"):
        runner.run_preset("tiny_only", "smoke", tmp_path / "empty", progress=False, partial=True)
    second = runner.run_preset(
        "tiny_only", "smoke", tmp_path, chunk=4, progress=False, only=["grpo H=3"], log=messages.append
    )
    assert trained == [("grpo H=3", (0,)), ("grpo H=3", (1,))]  # the other process's seeds are reused
    assert {p: p.stat().st_mtime_ns for p in tpo_files} == tpo_files
    assert [(r["key"], len(r["seeds"])) for r in second["rows"]] == [("tpo H=3", 2), ("grpo H=3", 2)]
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["rows"][1]["key"] == "grpo H=3" and saved["partial"] is False
    for bad in (["ppo_H_3"], []):
        with pytest.raises(ValueError, match="only must name runs of tiny_only .*tpo_H_3, grpo_H_3"):
            runner.run_preset("tiny_only", "smoke", tmp_path, progress=False, only=bad)


def test_a_batch_interrupted_mid_run_resumes_at_its_next_chunk_with_identical_results(tmp_path):
    run = Run(
        "tpo",
        TokenConfig(method="tpo", H=3, B=4, K=4, episodes=30, d_model=16, layers=1, ffn=32, track=0),
        (0,),
        seed_batch=1,
    )
    ckpt = tmp_path / "ckpt.npz"

    class Stop(Exception):
        pass

    class StopAt:
        def __init__(self, at):
            self.n, self.at = 0, at

        def update(self, k):
            self.n += k
            if self.at is not None and self.n >= self.at:
                raise Stop

    (whole,), _ = runner.execute([run], (0,), chunk=5)
    with pytest.raises(Stop):
        runner.execute([run], (0,), chunk=5, bar=StopAt(15), checkpoint=ckpt)
    assert ckpt.exists()
    messages = []
    (resumed,), _ = runner.execute([run], (0,), chunk=5, bar=StopAt(None), checkpoint=ckpt, log=messages.append)
    assert messages == ["resumed from ckpt.npz at 15/30"] and not ckpt.exists()
    for k in whole:
        np.testing.assert_array_equal(whole[k], resumed[k], err_msg=k)
    other = Run("tpo", run.cfg.replace(eta=2.0), (0,), seed_batch=1)  # a checkpoint of another config is ignored
    with pytest.raises(Stop):
        runner.execute([run], (0,), chunk=5, bar=StopAt(15), checkpoint=ckpt)
    messages.clear()
    runner.execute([other], (0,), chunk=5, checkpoint=ckpt, log=messages.append)
    assert messages == []


def test_remove_stale_temps_removes_only_the_temporaries_of_that_file(tmp_path):
    from tpo_core.lab import atomic_io

    target = tmp_path / "seed_1.npz"
    atomic_io.write_npz(target, x=np.arange(3))
    stale = [tmp_path / ".seed_1.npz.ab12cd.tmp", tmp_path / ".seed_1.npz.zz.tmp"]
    others = [tmp_path / ".seed_10.npz.ab12cd.tmp", tmp_path / ".seed_2.npz.q.tmp", tmp_path / "seed_1.npz.tmp"]
    for p in stale + others:
        p.write_bytes(b"partial")
    assert atomic_io.remove_stale_temps(target) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name] + [p.name for p in others])
    with np.load(target) as f:
        np.testing.assert_array_equal(f["x"], np.arange(3))
    assert atomic_io.remove_stale_temps(tmp_path / "missing" / "x.npz") == 0
