"""tpo_core.llm.rlvr: two-step TPO and GRPO smoke runs on a tiny random Llama (no model download)."""
import json

import numpy as np
import pytest

pytest.importorskip("torch", reason="tpo_core.llm needs PyTorch: pip install 'tpo_core[llm]'")
pytest.importorskip("trl", reason="tpo_core.llm needs trl: pip install 'tpo_core[llm]'")
pytest.importorskip("reasoning_gym", reason="tpo_core.llm needs reasoning-gym: pip install 'tpo_core[llm]'")

from tpo_core.llm import rlvr  # noqa: E402


def test_two_step_tpo_and_grpo_move_parameters_log_finite_diagnostics_and_resume(tmp_path, capsys):
    summary = rlvr.run_rlvr("leg_counting", "smoke", tmp_path, methods=("tpo", "grpo"))
    assert [(r["method"], r["seed"], r["steps"]) for r in summary["runs"]] == [("tpo", 0, 2), ("grpo", 0, 2)]
    for method, own in [("tpo", ("tv", "entropy_q")), ("grpo", ("abs_advantage",))]:
        curves = np.load(tmp_path / f"{method}_seed0.npz")
        for name in ("reward", "reward_std", "zero_variance_frac", "entropy", "loss") + own:
            assert curves[name].shape == (2,) and np.isfinite(curves[name]).all(), (method, name)
        meta = json.loads((tmp_path / f"{method}_seed0.json").read_text())
        assert meta["max_parameter_change"] > 0.0                     # the update did something
        assert meta["samples_first_step"] and meta["config"]["budget"]["k"] == 8
    tpo, grpo = np.load(tmp_path / "tpo_seed0.npz"), np.load(tmp_path / "grpo_seed0.npz")
    assert tpo["reward"][0] == grpo["reward"][0]                      # same prompts, seed, sampling: same first batch
    assert (tpo["tv"] > 0).any() and (grpo["abs_advantage"] > 0).any()  # the groups carried signal
    assert json.loads((tmp_path / "summary.json").read_text())["methods"] == ["grpo", "tpo"]
    assert not list(tmp_path.glob("*.partial.npz"))                   # replaced by the finished files
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]          # no trainer folders left behind
    page = (tmp_path / "figure.html").read_text()
    assert "mean |A|: GRPO" in page and "tpo (1 seed)" in page and "grpo (1 seed)" in page

    capsys.readouterr()
    rlvr.run_rlvr("leg_counting", "smoke", tmp_path, methods=("tpo", "grpo"))     # resumed: nothing retrained
    out = capsys.readouterr().out
    assert out.count("already done") == 2 and "steps in" not in out


def test_main_exit_2_with_one_line_on_bad_input(tmp_path, capsys):
    for argv in (["--task", "chess"], ["--budget", "huge"], ["--seeds", "a,b"], ["--steps", "0"],
                 ["--methods", "ppo"], ["--setting", "v99"], ["--measure-start", "2"], ["--measure-start", "0,8"]):
        assert rlvr.main(argv + ["--out", str(tmp_path)]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), (argv, err)
    assert not (tmp_path / "summary.json").exists()


def test_llm_package_never_imports_jax():
    import subprocess
    import sys

    code = ("import sys, tpo_core.llm.model, tpo_core.llm.tasks, tpo_core.llm.rlvr, tpo_core.bridge.trl; "
            "sys.exit(1 if 'jax' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
