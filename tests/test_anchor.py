"""tpo_core.lab.anchor.gradient_split: the split of TPO's batch gradient by kind of group, checked against the engine's
loss on sub-batches, and its run against the engine's run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tpo_core
from tpo_core.lab import anchor
from tpo_core.train import make_token_program, token_parts

CFG = tpo_core.TokenConfig(
    method="tpo",
    target="reverse_copy",
    reward="terminal",
    H=3,
    V=2,
    B=12,
    K=4,
    d_model=16,
    heads=2,
    layers=1,
    ffn=32,
    episodes=3,
    track=0,
)


@pytest.fixture(scope="module")
def split_run():
    return anchor.gradient_split(CFG)


def _subbatch(batch, rows):
    return {k: v[rows] for k, v in batch.items()}


def test_parts_are_the_gradients_of_each_kind_of_group(split_run):
    parts = token_parts(CFG)
    knobs = {k: jnp.float32(v) for k, v in CFG.knobs.items()}
    state = parts["init_one"](jax.random.key(0), knobs)
    batch, _ = parts["rollout"](state["params"], state["key"], 0, knobs)
    scores = np.asarray(batch["scores"])
    fail_rows = np.flatnonzero((scores == 0).all(-1))
    info_rows = np.flatnonzero(scores.std(-1) > 1e-6)
    assert len(fail_rows) and len(info_rows), "pick a seed with both kinds of group"
    # away from the rollout snapshot, as on epochs 2..E: the all-fail groups' gradient p − p_old is non-zero
    leaves, tree = jax.tree.flatten(state["params"])
    keys = jax.random.split(jax.random.key(1), len(leaves))
    moved = jax.tree.unflatten(tree, [x + 0.05 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])
    g, g_parts = split_run.split(moved["model"], batch, knobs)

    def engine_grad(rows):  # the engine's loss (a mean over its groups) on a sub-batch, weighted back to 1/B
        grads = jax.grad(lambda p: parts["loss_fn"](p, _subbatch(batch, rows), knobs)[0])(moved)["model"]
        return jax.tree.map(lambda x: x * len(rows) / CFG.B, grads)

    full = jax.grad(lambda p: parts["loss_fn"](p, batch, knobs)[0])(moved)["model"]
    close = lambda a, b: jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-3, atol=1e-6), a, b)  # noqa: E731
    close(g, full)
    close(g_parts["fail"], engine_grad(fail_rows))
    close(g_parts["informative"], engine_grad(info_rows))
    assert float(tpo_core.train.optax.tree.norm(g_parts["fail"])) > 1e-4
    # at the snapshot itself the all-fail part vanishes (up to sampling vs teacher-forcing rounding)
    g0, parts0 = split_run.split(state["params"]["model"], batch, knobs)
    assert float(tpo_core.train.optax.tree.norm(parts0["fail"])) < 1e-4 * float(tpo_core.train.optax.tree.norm(g0))


def test_run_is_the_engines_run(split_run):
    m = split_run([0, 1], CFG.episodes)
    ref = jax.tree.map(
        np.asarray, make_token_program(CFG).chunk(make_token_program(CFG).init([0, 1]), 0, CFG.episodes)[1]
    )
    np.testing.assert_allclose(m["error"], ref["error"], atol=1e-6)
    np.testing.assert_allclose(m["zero_var_frac"], ref["zero_var_frac"], atol=1e-6)
    np.testing.assert_allclose(m["grad_norm"][..., 0], ref["grad_norm"], rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(m["grad_norm"][..., -1], ref["grad_norm_last"], rtol=1e-3, atol=1e-7)
    assert m["grad_norm"].shape == (2, CFG.episodes, CFG.n_epochs)
    # epoch 1: p = p_old on every zero-variance group, so its parts are (float-rounding) zero
    assert (m["fail_norm"][..., 0] <= 1e-4 * m["grad_norm"][..., 0] + 1e-6).all()
    # the projection shares of the parts sum to 1, so the all-fail one is at most ‖∇L_fail‖/‖∇L‖
    ok = m["grad_norm"] > 0
    assert (m["fail_proj"][ok] <= m["fail_norm"][ok] / m["grad_norm"][ok] + 1e-5).all()
    assert ((m["fail_frac"] >= 0) & (m["fail_frac"] <= m["zero_var_frac"] + 1e-7)).all()


def test_only_the_default_tpo_run():
    with pytest.raises(ValueError):
        anchor.gradient_split(CFG.replace(method="grpo"))
