"""tpo_core.lab.optimizer_memory: Adam's step after a change of gradient scale follows the bias-corrected moment
recursions (closed forms written out here, in float64), and the engine's Muon-routed step ignores the scale."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tpo_core.lab import optimizer_memory as om
from tpo_core.train import make_optimizer, with_lr

B1, B2, EPS, LR = 0.9, 0.999, 1e-8, 1e-3


def adam_closed_form(g, warm, after, scale, nesterov=False):
    """Per-step update norms of Adam (lr LR, β₁ B1, β₂ B2, ε EPS) fed the constant gradient g for `warm` steps,
    then scale·g. For a gradient history g_1..g_t the moments are m_t = Σ_s (1−β₁)β₁^{t−s} g_s (and v likewise
    with g²), so after N steps of g and k of c·g: m = g[β₁^k(1 − β₁^N) + c(1 − β₁^k)],
    v = g²[β₂^k(1 − β₂^N) + c²(1 − β₂^k)]. Bias correction divides by 1 − β^t. Nesterov (optax's NAdam) uses
    β₁ m_t / (1 − β₁^{t+1}) + (1 − β₁) g_t / (1 − β₁^t) in place of m_t / (1 − β₁^t)."""
    g = np.asarray(g, np.float64)
    out = []
    for t in range(1, warm + after + 1):
        n, k = min(t, warm), max(t - warm, 0)
        c = 1.0 if k == 0 else scale
        m = g * (B1**k * (1 - B1**n) + scale * (1 - B1**k))
        v = g**2 * (B2**k * (1 - B2**n) + scale**2 * (1 - B2**k))
        m_hat = (B1 * m / (1 - B1 ** (t + 1)) + (1 - B1) * c * g / (1 - B1**t)) if nesterov else m / (1 - B1**t)
        v_hat = v / (1 - B2**t)
        out.append(LR * np.linalg.norm(m_hat / (np.sqrt(v_hat) + EPS)))
    return np.asarray(out)


@pytest.fixture(scope="module")
def grad():
    rng = np.random.default_rng(0)
    return {"w": jnp.asarray(rng.normal(size=(6, 4)), jnp.float32), "b": jnp.asarray(rng.normal(size=5), jnp.float32)}


@pytest.mark.parametrize("warm,scale", [(300, 1e-3), (1, 1e-3), (50, 10.0)])
def test_plain_adam_matches_the_moment_recursions(grad, warm, scale):
    params = jax.tree.map(jnp.zeros_like, grad)
    after = 400
    labels = jax.tree.map(lambda x: "all_params", params)
    norms = om.rescale_run(
        optax.adam(LR, b1=B1, b2=B2, eps=EPS), params, grad, warm=warm, after=after, scale=scale, labels=labels
    )["all"]
    flat = np.concatenate([np.ravel(x) for x in jax.tree.leaves(grad)])
    expected = adam_closed_form(flat, warm, after, scale)
    np.testing.assert_allclose(norms, expected, rtol=2e-4)
    if scale < 1 and warm > 1:  # a warm state: the scaled gradient's step is proportionally small
        assert norms[warm + 100] < 3 * scale * norms[warm - 1]
    if warm == 1:  # almost fresh: v̂ is still mostly the first gradient, so the step shrinks too
        assert norms[warm + 100] < 0.05 * norms[0]


def test_first_update_is_scale_free(grad):
    """Adam's first update is m̂/√v̂ = g/|g| (sign descent): the scale cancels, as the fresh-state demos show."""
    params = jax.tree.map(jnp.zeros_like, grad)
    tx = optax.adam(LR)
    first = [
        float(optax.tree.norm(tx.update(jax.tree.map(lambda x, s=s: s * x, grad), tx.init(params))[0]))
        for s in (1.0, 1e-3)
    ]
    np.testing.assert_allclose(first[1], first[0], rtol=1e-4)
    np.testing.assert_allclose(first[0], LR * np.sqrt(sum(x.size for x in jax.tree.leaves(grad))), rtol=1e-5)


def test_engine_optimizer_routes(grad):
    """The engine's optimizer: the Muon-routed matrix keeps its step length after the gradient shrinks 1000-fold;
    the AdamW-routed vector follows the NAdam closed form, which shrinks it by about the same factor."""
    params = jax.tree.map(jnp.zeros_like, grad)
    tx = make_optimizer("muon")
    warm, after, scale = 300, 300, 1e-3
    tx_lr = optax.GradientTransformation(lambda p: with_lr(tx.init(p), LR), tx.update)
    out = om.rescale_run(tx_lr, params, grad, warm=warm, after=after, scale=scale)
    assert set(out) == {"all", "muon", "adamw"}
    muon = out["muon"]
    np.testing.assert_allclose(muon[warm:], muon[warm - 1], rtol=1e-3)  # Newton–Schulz drops the scale
    expected = adam_closed_form(np.asarray(grad["b"]), warm, after, scale, nesterov=True)
    np.testing.assert_allclose(out["adamw"], expected, rtol=2e-4)
    assert out["adamw"][warm + 100] < 2 * scale * out["adamw"][warm - 1]  # once β₁^k is below the scale


def test_rescale_run_accepts_a_gradient_function(grad):
    params = jax.tree.map(jnp.zeros_like, grad)
    noisy = lambda i: jax.tree.map(lambda x: x * (1.0 + 0.0 * i), grad)  # noqa: E731 (same gradient, traced i)
    a = om.rescale_run(optax.adam(LR), params, noisy, warm=20, after=20, scale=0.5)
    b = om.rescale_run(optax.adam(LR), params, grad, warm=20, after=20, scale=0.5)
    np.testing.assert_allclose(a["all"], b["all"], rtol=1e-6)
    with pytest.raises(ValueError):
        om.rescale_run(optax.adam(LR), params, grad, warm=0, after=5, scale=0.5)
