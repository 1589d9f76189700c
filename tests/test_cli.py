"""The command line as a user meets it: exit codes, one-line errors, atomic results."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT

ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def run(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "tpo_core", *args], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=timeout
    )


@pytest.mark.parametrize(
    "args, needle",
    [
        (["train", "--eta", "0"], "eta"),
        (["train", "--K", "1"], "K"),
        (["train", "--K", "x"], "--K"),
        (["train", "--method", "nope"], "unknown method"),
        (["train", "--task", "chess"], "task"),
        (["train", "--reward", "dense"], "reward"),
        (["train", "--seeds", "0"], "seeds"),
        (["train", "--episodes", "0"], "episodes"),  # 0 is a value, not "use the default"
        (["train", "--episodes", "-5"], "episodes"),
        (["train", "--task", "mnist", "--episodes", "0"], "episodes"),
        (["train", "--epochs", "0"], "epochs"),
        (["train", "--first-seed", "-1"], "first-seed"),
        (["train", "--chunk", "0"], "chunk"),
        (["train", "--run-batch", "0"], "run-batch"),
        (["train", "--lr", "0"], "lr"),
        (["train", "--sweep", "eta=1,-2"], "eta"),
        (["train", "--sweep", "H=3,4"], "sweep"),
        (["train", "--sweep", "eta"], "sweep"),
        (["reproduce", "table3", "--seeds", "0"], "seeds"),
        (["reproduce", "mnist", "--budget", "paper-h10"], "budget"),
        (["reproduce", "table3", "--budget", "smoke", "--only", "ppo_H_9"], "only"),
        (["train", "--out", "run.txt"], "out"),
        (["fly"], "invalid choice"),
        (["train", "--seeds=--"], "--seeds"),
        (["train", "--B", "100000000"], "B=100000000, K=8, H=10 with 1 seed"),  # refused before compiling
        (["train", "--B", "4000000", "--seeds", "20", "--out", "big.json"], "20 seed"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, needle):
    r = run(*args)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert needle in lines[0]


def test_train_writes_json_atomically(tmp_path):
    out = tmp_path / "run.json"
    r = run(
        "train",
        "--task",
        "reversal",
        "--method",
        "tpo",
        "--H",
        "3",
        "--B",
        "16",
        "--episodes",
        "6",
        "--seeds",
        "2",
        "--chunk",
        "3",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    assert "final error" in r.stdout and "2 seeds" in r.stdout
    data = json.loads(out.read_text())
    assert data["config"]["H"] == 3 and data["seeds"] == [0, 1]
    assert np.asarray(data["metrics"]["error"]).shape == (2, 6)
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary left behind
    mask = os.umask(0)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~mask  # as open() would create it, not mkstemp's 0600


def test_train_bandit_npz(tmp_path):
    out = tmp_path / "bandit.npz"
    r = run("train", "--task", "mnist", "--method", "pg", "--episodes", "200", "--out", str(out), "--quiet")
    assert r.returncode == 0, r.stderr
    with np.load(out) as z:
        assert z["test_error"].shape == (1, 1)


def test_train_sweep_runs_every_value_in_one_program(tmp_path):
    out = tmp_path / "sweep.npz"
    r = run(
        "train",
        "--H",
        "3",
        "--B",
        "8",
        "--episodes",
        "4",
        "--seeds",
        "2",
        "--sweep",
        "eta=0.5,2",
        "--out",
        str(out),
        "--quiet",
    )
    assert r.returncode == 0, r.stderr
    assert "eta=0.5: final error" in r.stdout and "eta=2: final error" in r.stdout
    with np.load(out) as z:
        assert z["error"].shape == (2, 2, 4) and z["loss"].shape == (2, 2, 4)


def test_memory_refusal_comes_before_any_compile_and_writes_nothing(tmp_path):
    out = tmp_path / "big.json"
    r = run("train", "--B", "100000000", "--K", "16", "--H", "12", "--seeds", "3", "--out", str(out), timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and all(s in line for s in ("B=100000000", "K=16", "H=12", "3 seed", "available"))
    assert "ep/s" not in r.stderr  # no progress bar: nothing started
    assert not list(tmp_path.iterdir())


def test_one_seed_prints_no_standard_error():
    r = run("train", "--H", "3", "--B", "8", "--episodes", "2", "--seeds", "1", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "nan" not in r.stdout and "1 seed, no SE" in r.stdout
