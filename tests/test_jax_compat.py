"""The engine on every jax its metadata admits: XLA compile options that the installed XLA does not know are dropped
(``runtime.supported_compiler_options``), and a tiny run trains on another jax when a python is given for it."""

import os
import pathlib
import re
import subprocess

import jax
import jax.numpy as jnp
import pytest

from tests import fresh_venv
from tpo_core import runtime

ROOT = pathlib.Path(__file__).resolve().parents[1]
UNKNOWN = "xla_tpo_core_no_such_option"  # a name no XLA release knows


def test_an_unknown_compile_option_is_dropped_and_a_known_one_kept():
    known = {"xla_backend_optimization_level": 1}  # a DebugOptions field in every jaxlib the package admits
    assert runtime.supported_compiler_options({**known, UNKNOWN: 1}) == known
    assert runtime.supported_compiler_options({UNKNOWN: 1}) == {}
    assert runtime.supported_compiler_options(known) == known
    assert runtime.supported_compiler_options({}) == {}


def test_each_option_set_is_checked_once_per_process(monkeypatch):
    calls = []
    probe = runtime._compiles_with
    monkeypatch.setattr(runtime, "_compiles_with", lambda options: calls.append(dict(options)) or probe(options))
    monkeypatch.setattr(runtime, "_supported", {})
    options = {"xla_backend_optimization_level": 2, UNKNOWN: 2}
    first = runtime.supported_compiler_options(options)
    assert calls == [options, {"xla_backend_optimization_level": 2}, {UNKNOWN: 2}]  # the set, then each alone
    assert runtime.supported_compiler_options(dict(options)) == first == {"xla_backend_optimization_level": 2}
    assert len(calls) == 3  # cached: no second probe
    first["mutated"] = True  # callers get a copy
    assert "mutated" not in runtime.supported_compiler_options(options)


def test_the_engine_drops_an_option_xla_refuses_and_still_compiles(monkeypatch):
    """A training program's options with one XLA refuses (as jaxlib 0.9.2 refuses ``xla_cpu_opt_preset``): the
    engine leaves it out and compiles with the rest."""
    if jax.default_backend() != "cpu":
        pytest.skip("the engine's compile options are CPU options; off the CPU it uses XLA's defaults")
    monkeypatch.setenv("XLA_FLAGS", "")  # the suite's fast-compile flags would make the engine pass no options
    pinned = dict(runtime.CHUNK_COMPILER_OPTIONS)
    monkeypatch.setattr(runtime, "CHUNK_COMPILER_OPTIONS", {UNKNOWN: True, **pinned})
    options = runtime.chunk_compiler_options()
    assert UNKNOWN not in options and options == runtime.supported_compiler_options(pinned)
    double = runtime.TopLevelJit(lambda x: 2 * x, options=options)
    assert double(jnp.arange(3.0)).tolist() == [0.0, 2.0, 4.0]
    assert dict(double.lower(jnp.arange(3.0))._lowering._compiler_options_kvs) == options


def _pinned_jax() -> str:
    return re.search(r"^jax\[cpu\]==(\S+)", (ROOT / "requirements.txt").read_text(), re.M).group(1)


def test_the_pinned_jax_keeps_every_engine_option(monkeypatch):
    """On the pinned jax the filter changes nothing: the programs compile with the same options as before it."""
    if jax.__version__ != _pinned_jax() or jax.default_backend() != "cpu":
        pytest.skip(
            f"checks the pinned jax {_pinned_jax()} on the CPU (here jax {jax.__version__}, {jax.default_backend()})"
        )
    monkeypatch.setenv("XLA_FLAGS", "")
    assert runtime.chunk_compiler_options() == runtime.CHUNK_COMPILER_OPTIONS
    assert runtime.init_compiler_options() == runtime.INIT_COMPILER_OPTIONS


def test_the_declared_floor_is_the_tested_one():
    """The slow test below trains on pyproject's floors themselves (fresh_venv.floor_pins), whatever they are; these
    are the ones its comment says were verified."""
    assert {"jax[cpu]==0.7.1", "jaxlib==0.7.1", "flax==0.12", "optax==0.2.5"} <= set(fresh_venv.floor_pins())


# A tiny token run (TPO and GRPO, Muon and Adam) and a tiny MNIST-bandit run on synthetic images, with the engine's own
# compile options (no XLA_FLAGS), in a python of another venv.
TINY_RUNS = """
import numpy as np, jax, flax, optax
from tpo_core import runtime
from tpo_core.config import BanditConfig, TokenConfig
from tpo_core.lab.mnist import Dataset
from tpo_core.train import train_bandit, train_tokens
print("jax", jax.__version__, "flax", flax.__version__, "optax", optax.__version__)
print("chunk options", runtime.chunk_compiler_options(), "init options", runtime.init_compiler_options())
tiny = dict(H=3, B=8, K=4, episodes=2, d_model=16, heads=2, layers=1, ffn=32)
for method, optimizer in (("tpo", "muon"), ("grpo", "adam")):
    m = train_tokens(TokenConfig(method=method, optimizer=optimizer, **tiny), seeds=(0,))
    assert np.isfinite(np.asarray(m["loss"])).all(), (method, m["loss"])
rng = np.random.default_rng(0)
images = Dataset(rng.random((64, 784), np.float32), rng.integers(0, 10, 64, np.int32),
                 rng.random((16, 784), np.float32), rng.integers(0, 10, 16, np.int32), "synthetic")
m = train_bandit(BanditConfig(method="tpo", steps=2, batch=8, eval_every=1), images, seeds=(0,))
assert np.isfinite(np.asarray(m["test_error"])).all(), m
print("tiny runs ok")
"""


FLOOR = "pyproject-floors"


@pytest.mark.slow
@pytest.mark.parametrize(
    "python", [p for p in os.environ.get("TPO_JAX_FLOOR_PY", "").split(os.pathsep) if p] or [FLOOR]
)
def test_tiny_runs_train_on_another_jax(python):
    """The tiny runs in a venv of pyproject's floors (every core dependency at its declared floor: jax 0.7.1,
    flax 0.12.0, optax 0.2.5, numpy 1.26, scikit-learn 1.3, plotly 6, tqdm 4.60; their own dependencies as pip
    resolves them), built once and cached under /tmp (tests/fresh_venv.py: started in the background as the session
    starts; 1.5-5 min to build from PyPI, 1-2 min to run). ``TPO_JAX_FLOOR_PY`` names other pythons instead (several: joined by ``os.pathsep``), e.g. one with jax
    0.9.2; this checkout is put on their path. Verified 2026-12: the floors above; jax 0.9.2 / flax 0.12.6 /
    optax 0.2.8 (both refuse ``xla_cpu_opt_preset``); and the pinned jax."""
    at_floor = python == FLOOR
    if at_floor:
        python = fresh_venv.floor_venv()
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "TPO_JAX_CACHE")}  # the engine's options
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([python, "-c", TINY_RUNS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and "tiny runs ok" in done.stdout, done.stdout + done.stderr[-4000:]
    if at_floor:  # it ran on the floors themselves
        from packaging.version import Version

        ran = done.stdout.splitlines()[0].split()  # "jax X flax Y optax Z"
        floors = {p.split("==")[0].split("[")[0]: p.split("==")[1] for p in fresh_venv.floor_pins()}
        assert all(Version(ran[i + 1]) == Version(floors[ran[i]]) for i in (0, 2, 4)), (ran, floors)
