"""Property-based input tests (hypothesis): every input to the CLI and to the demo's callbacks gets a clear
error that names what is wrong, or a result; never a traceback, and no partial file left behind.

The strategies mix valid values (small, so the runs they start are short), junk (text, NaN, ±inf, negative
and huge numbers, None) and sizes that cannot fit in memory; the properties hold for all of them."""

from __future__ import annotations

import contextlib
import io
import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from demos import app as A
from demos import explorer as X
from demos import training as T
from tpo_core.lab import cli

JUNK = st.one_of(
    st.none(),
    st.text(max_size=6),
    st.just(""),
    st.just("nan"),
    st.just("inf"),
    st.just("-inf"),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**12), 10**12),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)
SETTINGS = settings(
    deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


def _one_of_names(message: str, names) -> bool:
    return any(n.lower() in message.lower() for n in names)


# ------------------------------------------------------------------------------------------------
# the demo's explorer: numpy only, so hundreds of draws are cheap
# ------------------------------------------------------------------------------------------------
NUMBER_TEXT = st.one_of(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=0, max_size=70).map(lambda v: ", ".join(map(str, v))),
    st.text(max_size=40),
    st.just("nan, 1"),
    st.just("1e400, 0"),
    st.just("-inf 0 0"),
)


@settings(SETTINGS, max_examples=200)
@given(
    K=st.one_of(st.integers(-3, 80), JUNK),
    eta=st.one_of(st.floats(0, 200), JUNK),
    scores_preset=st.one_of(st.sampled_from(X.SCORE_PRESETS), st.text(max_size=8)),
    logp_preset=st.one_of(st.sampled_from(X.LOGP_PRESETS), st.text(max_size=8)),
    scores_text=NUMBER_TEXT,
    logp_text=NUMBER_TEXT,
    seed=st.one_of(st.integers(-5, 5), JUNK),
)
def test_explorer_gives_a_result_or_an_error_naming_the_input(
    K, eta, scores_preset, scores_text, logp_preset, logp_text, seed
):
    try:
        s_txt, l_txt, a = A.explore_values(K, eta, scores_preset, scores_text, logp_preset, logp_text, seed)
    except X.InputError as e:
        assert _one_of_names(str(e), ("K", "η", "eta", "scores", "log-probs", "preset", "seed")), str(e)
    else:
        q = a["q"] if isinstance(a, dict) and "q" in a else None
        if q is not None:
            assert all(math.isfinite(float(v)) for v in q) and abs(sum(map(float, q)) - 1) < 1e-6
    out = A.explore(K, eta, scores_preset, scores_text, logp_preset, logp_text, seed)  # the UI path never raises
    assert len(out) == 6


# ------------------------------------------------------------------------------------------------
# the demo's training request: validated before anything trains
# ------------------------------------------------------------------------------------------------
@settings(SETTINGS, max_examples=200)
@given(
    task=st.one_of(st.sampled_from(T.TASKS), JUNK),
    methods=st.one_of(st.lists(st.sampled_from(sorted(A.M.REGISTRY) + ["nope", ""]), max_size=6), JUNK),
    reward=st.one_of(st.sampled_from(T.REWARDS), JUNK),
    H=st.one_of(st.integers(-2, 70), JUNK),
    B=st.one_of(st.integers(-2, 400), JUNK),
    K=st.one_of(st.integers(-2, 40), JUNK),
    eta=st.one_of(st.floats(0, 200), JUNK),
    episodes=st.one_of(st.integers(-2, 3000), JUNK),
    n_seeds=st.one_of(st.integers(-1, 6), JUNK),
    seed=st.one_of(st.integers(-2, 2**32), JUNK),
    bandit_steps=st.one_of(st.integers(-100, 20000), JUNK),
)
def test_training_request_is_valid_or_an_error_naming_the_input(
    task, methods, reward, H, B, K, eta, episodes, n_seeds, seed, bandit_steps
):
    try:
        req = T.validate(task, methods, reward, H, B, K, eta, episodes, n_seeds, seed, bandit_steps)
    except X.InputError as e:
        names = (
            "task",
            "methods",
            "reward",
            "H",
            "B",
            "K",
            "η",
            "episodes",
            "seeds",
            "seed",
            "MNIST steps",
            "method",
            "eta",
        )
        assert _one_of_names(str(e), names), str(e)
    else:
        assert req.task in T.TASKS and 1 <= len(req.seeds) <= T.MAX_SEEDS and req.configs


# ------------------------------------------------------------------------------------------------
# the CLI, in process: exit 0 with the one results file, or exit 2 with one line and nothing written
# ------------------------------------------------------------------------------------------------
def _value(small, junk_extra=()):
    return st.one_of(
        small,
        st.sampled_from(["0", "-1", "x", "", "nan", "inf", "1e400", "3.5", "--", *junk_extra]),
        st.integers(-(10**9), 10**9).map(str),
    )


CLI_FLAGS = {
    "--H": _value(st.sampled_from(["2", "3"])),
    "--B": _value(st.sampled_from(["1", "2", "100000000"])),
    "--K": _value(st.sampled_from(["2", "3"]), ("2000",)),
    "--eta": _value(st.sampled_from(["0.5", "1", "1e-9"]), ("-0.5",)),
    "--lr": _value(st.sampled_from(["1e-3"])),
    "--epochs": _value(st.sampled_from(["1", "2"])),
    "--seeds": _value(st.sampled_from(["1", "2"])),
    "--method": st.sampled_from(["tpo", "grpo", "dg", "nope", "ce", ""]),
    "--reward": st.sampled_from(["terminal", "bag", "sequential", "dense", ""]),
    "--target": st.sampled_from(["reverse_copy", "copy", "flip", "mirror"]),
    "--sweep": st.sampled_from(["eta=0.5,1", "eta=1,-2", "H=3", "eta", "lr=1e-3", "eta=0.5,1"]),
    "--task": st.sampled_from(["reversal", "chess", ""]),
}


@pytest.fixture
def workdir(tmp_path):
    old = os.getcwd()
    os.chdir(tmp_path)
    yield tmp_path
    os.chdir(old)


@settings(SETTINGS, max_examples=25)
@given(
    flags=st.dictionaries(st.sampled_from(sorted(CLI_FLAGS)), st.just(None), max_size=5).flatmap(
        lambda d: st.fixed_dictionaries({k: CLI_FLAGS[k] for k in d})
    )
)
def test_cli_train_exits_0_with_its_file_or_2_with_one_line(flags, workdir):
    for p in workdir.iterdir():
        p.unlink()
    argv = ["train", "--episodes", "1", "--quiet", "--out", "run.json"]
    for k, v in flags.items():
        argv += [k, v] if not v.startswith("-") else [f"{k}={v}"]
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = cli.main(argv)
    files = sorted(p.name for p in workdir.iterdir())
    if rc == 0:
        assert files == ["run.json"], (argv, files)
        assert "nan" not in out.getvalue(), out.getvalue()
    else:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), (argv, err.getvalue())
        assert "Traceback" not in err.getvalue()
        assert files == [], (argv, files)
