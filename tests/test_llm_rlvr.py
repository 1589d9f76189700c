"""tpo_core.lab.llm.rlvr: two-step TPO and GRPO smoke runs on a tiny random Llama (no model download)."""

import json

import numpy as np
import pytest

pytest.importorskip("torch", reason="tpo_core.lab.llm needs PyTorch: pip install 'tpo_core[llm]'")
pytest.importorskip("trl", reason="tpo_core.lab.llm needs trl: pip install 'tpo_core[llm]'")
pytest.importorskip("reasoning_gym", reason="tpo_core.lab.llm needs reasoning-gym: pip install 'tpo_core[llm]'")

from tpo_core.lab.llm import rlvr


def test_two_step_tpo_and_grpo_move_parameters_log_finite_diagnostics_and_resume(tmp_path, capsys):
    summary = rlvr.run_rlvr("leg_counting", "smoke", tmp_path, methods=("tpo", "grpo"))
    assert [(r["method"], r["seed"], r["steps"]) for r in summary["runs"]] == [("tpo", 0, 2), ("grpo", 0, 2)]
    spreads = tuple(f"{x}_{s}" for x in ("logp_sum", "logp_mean", "length") for s in ("std", "range"))
    for method, own in [("tpo", ("tv", "entropy_q", *spreads)), ("grpo", ("abs_advantage",))]:
        curves = np.load(tmp_path / f"{method}_seed0.npz")
        for name in ("reward", "reward_std", "zero_variance_frac", "entropy", "loss", "grad_norm") + own:
            assert curves[name].shape == (2,) and np.isfinite(curves[name]).all(), (method, name)
        meta = json.loads((tmp_path / f"{method}_seed0.json").read_text())
        assert meta["max_parameter_change"] > 0.0  # the update did something
        assert meta["samples_first_step"] and meta["config"]["budget"]["k"] == 8
    records = json.loads((tmp_path / "tpo_seed0.json").read_text())
    for which in ("completions_first_step", "completions_last_step"):  # every completion of that step
        assert len(records[which]) == 4 * 8
        assert all(r["logp_sum"] == pytest.approx(r["logp_mean"] * max(r["length"], 1)) for r in records[which])
    tpo, grpo = np.load(tmp_path / "tpo_seed0.npz"), np.load(tmp_path / "grpo_seed0.npz")
    assert (tpo["logp_sum_std"] >= tpo["logp_mean_std"]).all()  # summed scores spread wider than means
    assert tpo["reward"][0] == grpo["reward"][0]  # same prompts, seed, sampling: same first batch
    assert (tpo["tv"] > 0).any() and (grpo["abs_advantage"] > 0).any()  # the groups carried signal
    assert json.loads((tmp_path / "summary.json").read_text())["methods"] == ["grpo", "tpo"]
    assert not list(tmp_path.glob("*.partial.npz"))  # replaced by the finished files
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]  # no trainer folders left behind
    page = (tmp_path / "figure.html").read_text()
    assert "mean |A|: GRPO" in page and "tpo (1 seed)" in page and "grpo (1 seed)" in page

    capsys.readouterr()
    rlvr.run_rlvr("leg_counting", "smoke", tmp_path, methods=("tpo", "grpo"))  # resumed: nothing retrained
    out = capsys.readouterr().out
    assert out.count("already done") == 2 and "steps in" not in out


def test_figure_draws_every_seed_and_the_seed_mean(tmp_path):
    rng = np.random.default_rng(0)
    curves = {}
    for seed in (0, 3):  # constructed runs, 5 steps each
        c = {key: rng.random(5) for key, _ in rlvr.FIGURE_PANELS}
        np.savez(tmp_path / f"tpo_seed{seed}.npz", **c)
        curves[seed] = c
    np.savez(tmp_path / "tpo_seed7.partial.npz", **curves[0])  # in progress: not drawn
    assert [r["seed"] for r in rlvr.load_runs(tmp_path)["tpo"]] == [0, 3]
    fig = rlvr.figure(tmp_path)
    reward = [t for t in fig.data if t.xaxis == "x" and t.fill is None]
    by_name = {t.name: np.asarray(t.y) for t in reward}
    np.testing.assert_allclose(by_name["tpo seed 0"], curves[0]["reward"])
    np.testing.assert_allclose(by_name["tpo seed 3"], curves[3]["reward"])
    np.testing.assert_allclose(by_name["tpo (2 seeds)"], (curves[0]["reward"] + curves[3]["reward"]) / 2)
    assert len(reward) == 3


def test_main_exit_2_with_one_line_on_bad_input(tmp_path, capsys):
    for argv in (
        ["--task", "chess"],
        ["--budget", "huge"],
        ["--seeds", "a,b"],
        ["--steps", "0"],
        ["--methods", "ppo"],
        ["--setting", "v99"],
        ["--measure-start", "2"],
        ["--measure-start", "0,8"],
    ):
        assert rlvr.main(argv + ["--out", str(tmp_path)]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), (argv, err)
    assert not (tmp_path / "summary.json").exists()


def test_llm_package_never_imports_jax():
    import subprocess
    import sys

    code = (
        "import sys, tpo_core.lab.llm.model, tpo_core.lab.llm.tasks, tpo_core.lab.llm.rlvr, tpo_core.bridge.trl, "
        "tpo_core.lab.reproduce.stats, tpo_core.lab.reproduce.paper_numbers; "
        "sys.exit(1 if 'jax' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_reproduce_preset_writes_a_report_summary_and_partial_summarises_without_training(tmp_path, capsys):
    from tpo_core.lab import cli, report

    out = tmp_path / "gc"
    assert cli.main(["reproduce", "llm_graph_coloring", "--partial", "--budget", "smoke", "--out", str(out)]) == 2
    assert "no finished run" in capsys.readouterr().err
    assert cli.main(["reproduce", "llm_graph_coloring", "--budget", "smoke", "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["preset"] == "llm_graph_coloring" and summary["budget"] == "smoke" and summary["kind"] == "llm"
    assert summary["config"]["task"] == "graph_coloring" and summary["methods"] == ["grpo", "tpo"]
    assert "GRPO collapses" in summary["claim"]  # the paper's claim, from paper_numbers
    rows = {(r["key"], r["metric"]): r for r in summary["rows"]}
    assert set(rows) == {(m, k) for m in ("tpo", "grpo") for k in ("start_reward", "final_reward")}
    for m in ("tpo", "grpo"):  # recomputed here from the per-step curves
        reward = np.load(out / f"{m}_seed0.npz")["reward"]
        assert rows[(m, "start_reward")]["ours"] == pytest.approx(reward[0])
        assert rows[(m, "final_reward")]["ours"] == pytest.approx(reward[-max(1, len(reward) // 5) :].mean())
        assert rows[(m, "final_reward")]["se"] is None and rows[(m, "final_reward")]["seeds"] == [0]  # one seed
        assert not rows[(m, "final_reward")]["comparable"]
    md = report.to_markdown(report.load_summaries(tmp_path))
    assert "`llm_graph_coloring`, budget `smoke`" in md and "PyTorch + TRL" in md
    assert "mean reward at step 1 (the starting policy)" in md and "0 ran at the paper's own setting" in md

    capsys.readouterr()
    (out / "summary.json").unlink()
    assert cli.main(["reproduce", "llm_graph_coloring", "--partial", "--budget", "smoke", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "steps in" not in printed.out + printed.err  # nothing trained
    assert json.loads((out / "summary.json").read_text())["rows"] == summary["rows"]
    for argv in (["--chunk", "5"], ["--only", "ppo"], ["--budget", "paper"], ["--seeds", "0"]):
        assert cli.main(["reproduce", "llm_graph_coloring", "--out", str(out), *argv]) == 2, argv
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def _fake_runs(out, tpo_mean_finals, grpo_finals, tvs):
    from tpo_core.lab import atomic_io

    for seed, (m, g, tv) in enumerate(zip(tpo_mean_finals, grpo_finals, tvs)):
        for method, final in (("tpo_mean", m), ("grpo", g)):
            atomic_io.write_json(
                out / f"{method}_seed{seed}.json", {"method": method, "seed": seed, "final_reward": final}
            )
            curves = {"tv": np.asarray(tv, float)} if method == "tpo_mean" else {"abs_advantage": np.ones(3)}
            atomic_io.write_npz(out / f"{method}_seed{seed}.npz", **curves)


@pytest.mark.parametrize(
    "finals, tvs, held, falsified",
    [
        ((0.90, 0.85, 0.50), [[0.7, 0.5, np.nan]] * 3, True, False),  # 2 of 3 keep up, TV moves: held
        ((0.90, 0.85, 0.80), [[0.01, 0.02, 0.5]] * 3, False, False),  # rewards keep up but TV median 0.02
        ((0.90, 0.55, 0.40), [[0.7, 0.5, 0.6]] * 3, False, True),  # 2 of 3 end below 0.6: falsified
    ],
)
def test_prediction_check_reaches_each_outcome(tmp_path, finals, tvs, held, falsified):
    _fake_runs(tmp_path, finals, (0.96, 0.95, 0.97), tvs)
    result = rlvr.prediction_check(tmp_path)
    flat = [x for tv in tvs for x in tv if np.isfinite(x)]
    assert result["median_tv"] == pytest.approx(float(np.median(flat)))
    assert result["keeps_up"] == [f >= g - 0.1 for f, g in zip(finals, (0.96, 0.95, 0.97))]
    assert result["held"] is held and result["falsified"] is falsified


def test_prediction_check_waits_for_three_seeds(tmp_path):
    _fake_runs(tmp_path, (0.9,), (0.96,), [[0.7]])
    result = rlvr.prediction_check(tmp_path)
    assert result["seeds"] == [0] and result["held"] is None and result["falsified"] is None
