"""Run-axis sharding over several devices.

XLA's host-platform flag must be set before jax is imported, so each device count runs in its own
subprocess; the test compares the curves of one device with those of two (forced) CPU devices and checks
that the two-device outputs really are spread over both devices.

The property that holds, and is tested: the same program semantics. The partitioned program may reduce in
another order, so the numbers agree to float rounding over the first steps (checked here on short runs);
over long runs the float differences grow chaotically (e.g. ``reproduce mnist --budget smoke`` ends up to
~1 point of test error apart), as any reordering of float sums would, while every seed stays an independent
sample of the same distribution.
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, sys
import jax, numpy as np
from tpo_core import runtime, train
from tpo_core.config import BanditConfig, TokenConfig
from tpo_core.lab.mnist import Dataset
from tpo_core.lab.reproduce import Run, runner
from tpo_core.lab.reproduce.presets import SMOKE_MODEL

runtime.enable_compile_cache()
out = {"device_count": jax.device_count()}
cfg = TokenConfig(method="tpo", H=3, B=4, K=4, episodes=4, track=0, **SMOKE_MODEL)
for name, seeds in (("even", (0, 1)), ("odd", (0, 1, 2))):
    (curves,), info = runner.execute([Run(name, cfg, seeds)], seeds, chunk=2)
    out[name] = {k: v.tolist() for k, v in curves.items()}
    out[name + "_devices"] = info["devices"]
# the carry of the program itself: where do its leaves live?
program = train.make_token_program(cfg)
carry = program.init([0, 1])
leaf = jax.tree.leaves(carry["params"])[0]
out["carry_devices"] = len(leaf.sharding.device_set)
out["carry_spec"] = str(getattr(leaf.sharding, "spec", None))
carry, metrics = program.chunk(carry, 0, 2)
out["metric_devices"] = len(metrics["error"].sharding.device_set)
rng = np.random.default_rng(0)
ds = Dataset(rng.random((64, 8), dtype=np.float32), rng.integers(0, 10, 64).astype(np.int32),
             rng.random((32, 8), dtype=np.float32), rng.integers(0, 10, 32).astype(np.int32), "random")
(curves,), info = runner.execute([Run("bandit", BanditConfig(method="tpo", steps=20, eval_every=10, batch=8), (0, 1))],
                                 (0, 1), ds)
out["bandit"] = {k: v.tolist() for k, v in curves.items()}
out["bandit_devices"] = info["devices"]
json.dump(out, sys.stdout)
"""


def _run(devices: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "force_host_platform_device_count" not in f]
    if devices > 1:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    env["XLA_FLAGS"] = " ".join(flags)
    r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def one_and_two():
    return _run(1), _run(2)


def test_two_devices_really_shard_the_seed_axis(one_and_two):
    one, two = one_and_two
    assert one["device_count"] == 1 and two["device_count"] == 2
    assert one["carry_devices"] == 1 and one["metric_devices"] == 1
    assert two["carry_devices"] == 2 and "runs" in two["carry_spec"]
    assert two["metric_devices"] == 2  # the jitted chunk keeps the seed sharding
    assert two["even_devices"] == 2 and two["odd_devices"] == 2  # 3 seeds padded to 4
    assert two["bandit_devices"] == 2


def test_sharded_results_match_one_device(one_and_two):
    """Same program semantics: the first two episodes agree to float rounding; after that, Muon normalises
    near-zero gradients (all-fail groups) into full-size steps, so rounding differences of the partitioned
    reductions can grow to a few percent: later values must only stay close."""
    one, two = one_and_two
    for name, n_seeds in (("even", 2), ("odd", 3), ("bandit", 2)):
        assert set(one[name]) == set(two[name])
        for k in one[name]:
            a, b = np.asarray(one[name][k]), np.asarray(two[name][k])
            assert a.shape == b.shape and a.shape[0] == n_seeds, (name, k)
            # Muon's Newton–Schulz iteration magnifies rounding in the update itself (~1e-3 relative)
            tight = 1e-2 if k in ("step_norm", "update_norm") else 1e-4
            np.testing.assert_allclose(a[:, :2], b[:, :2], rtol=tight, atol=1e-6, err_msg=f"{name}/{k}")
            np.testing.assert_allclose(a, b, rtol=0.2, atol=1e-3, err_msg=f"{name}/{k}")
    # the first episodes' error curves are counts of exact matches over a fixed batch: they agree exactly
    np.testing.assert_array_equal(np.asarray(one["odd"]["error"])[:, :2], np.asarray(two["odd"]["error"])[:, :2])
    # padding for the second device does not change the first seeds' results either
    np.testing.assert_allclose(
        np.asarray(one["even"]["loss"])[:, :2], np.asarray(one["odd"]["loss"])[:2, :2], rtol=1e-5, atol=1e-6
    )
