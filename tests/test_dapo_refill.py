"""TPO + dynamic-sampling refill (``tpo_refill``): selection, loss and engine against hand-built cases."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tpo_core import TokenConfig, methods
from tpo_core.train import token_parts, train_tokens

TINY = dict(H=3, V=2, K=4, d_model=32, heads=2, layers=1, ffn=64, track=0)


def _np_tpo_ce(logp, logp_old, scores, eta):
    """Per-group TPO cross-entropy, in numpy: q ∝ p_old·exp(u/η), u = population z-score (0 if all equal)."""
    c = scores - scores.mean(-1, keepdims=True)
    sd = np.sqrt((c**2).mean(-1, keepdims=True))
    u = np.where(sd > 1e-6, c / np.where(sd > 1e-6, sd, 1.0), 0.0)
    lp_old = logp_old - np.log(np.exp(logp_old).sum(-1, keepdims=True))
    q = np.exp(lp_old + u / eta)
    q /= q.sum(-1, keepdims=True)
    lp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    return -(q * lp).sum(-1)


def test_refill_select_takes_the_first_informative_groups_in_draw_order():
    scores = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 1], [0, 1, 1], [0, 0, 1], [0, 1, 0]], np.float32)  # N = 6
    idx, keep = methods.refill_select(jnp.asarray(scores), 3)
    np.testing.assert_array_equal(idx, [1, 3, 4])  # groups 0 and 2 are all-equal
    assert bool(keep.all())
    idx, keep = methods.refill_select(jnp.asarray(scores[[0, 1, 2, 3]]), 4)  # 2 informative of 4 drawn
    np.testing.assert_array_equal(idx, [1, 3, 0, 2])  # filler: the rest, in draw order
    np.testing.assert_array_equal(keep, [True, True, False, False])
    assert float(keep.mean()) == 0.5  # the fill fraction


@pytest.mark.parametrize("n_informative", [0, 1, 3, 5])
def test_refill_loss_is_tpo_on_exactly_the_informative_groups(n_informative):
    rng = np.random.default_rng(n_informative)
    B, K, eta = 5, 6, 0.7
    scores = rng.integers(0, 2, (B, K)).astype(np.float32)
    scores[:, 0], scores[:, 1] = 1.0, 0.0  # every group informative ...
    scores[n_informative:] = 1.0  # ... but the last B - n are all-equal
    idx, keep = methods.refill_select(jnp.asarray(scores), B)
    assert int(keep.sum()) == n_informative
    logp, logp_old = rng.normal(size=(2, B, K)).astype(np.float32) * 2
    b = dict(
        logp=jnp.asarray(logp[idx]), logp_old=jnp.asarray(logp_old[idx]), scores=jnp.asarray(scores[idx]), keep=keep
    )
    hp = dict(eta=eta, std_floor=1e-6)
    loss = float(methods.get("tpo_refill").loss(b, hp))
    ce = _np_tpo_ce(logp, logp_old, scores, eta)
    expected = ce[:n_informative].mean() if n_informative else 0.0
    np.testing.assert_allclose(loss, expected, rtol=1e-5, atol=1e-6)
    # the gradient: (p - q)/n on the informative rows, exactly zero on the filler
    g = np.asarray(jax.grad(lambda lp: methods.get("tpo_refill").loss(dict(b, logp=lp), hp))(b["logp"]))
    sel = np.asarray(idx)
    p = np.exp(logp[sel]) / np.exp(logp[sel]).sum(-1, keepdims=True)
    lp_old = logp_old[sel] - np.log(np.exp(logp_old[sel]).sum(-1, keepdims=True))
    c = scores[sel] - scores[sel].mean(-1, keepdims=True)
    sd = np.sqrt((c**2).mean(-1, keepdims=True))
    u = np.where(sd > 1e-6, c / np.where(sd > 1e-6, sd, 1.0), 0.0)
    q = np.exp(lp_old + u / eta)
    q /= q.sum(-1, keepdims=True)
    k = np.asarray(keep)[:, None]
    np.testing.assert_allclose(g, k * (p - q) / max(n_informative, 1), atol=1e-6)


def test_oversample_is_a_checked_static_parameter():
    m = methods.tpo_refill(4)
    assert m.name == "tpo_refill_x4" and m.groups_drawn(100) == 400 and m.refill
    assert methods.get("tpo_refill").groups_drawn(100) == 200
    assert methods.get("tpo").groups_drawn(100) == 100 and not methods.get("tpo").refill
    with pytest.raises(ValueError, match="oversample"):
        methods.tpo_refill(0.5)


def test_engine_batch_is_the_refill_selection_of_a_double_draw():
    """With r = 2 and B = 8 the episode draws exactly what TPO with B = 16 draws (same key, same shapes); the
    training batch must be the first 8 informative of those 16 groups, in draw order."""
    refill = TokenConfig(method="tpo_refill", B=8, episodes=1, **TINY)
    double = TokenConfig(method="tpo", B=16, episodes=1, **TINY)
    parts_r, parts_d = (token_parts(c) for c in (refill, double))
    key = jax.random.key(3)
    state = parts_r["init_one"](key, refill.knobs)
    state_d = parts_d["init_one"](key, double.knobs)
    for a, b in zip(jax.tree.leaves(state["params"]), jax.tree.leaves(state_d["params"])):
        np.testing.assert_array_equal(a, b)  # the model does not depend on B
    for e in range(3):
        batch, error = parts_r["rollout"](state["params"], key, e, refill.knobs)
        full, error_d = parts_d["rollout"](state["params"], key, e, double.knobs)
        s = np.asarray(full["scores"])
        informative = np.flatnonzero(s.std(-1) > 1e-6)
        rest = np.flatnonzero(s.std(-1) <= 1e-6)
        want = np.concatenate([informative, rest])[:8]
        for k in ("prompts", "answers", "scores", "logp_old", "token_logp_old"):
            np.testing.assert_array_equal(batch[k], np.asarray(full[k])[want])
        np.testing.assert_array_equal(batch["keep"], np.arange(8) < len(informative))
        assert float(error) == float(error_d)  # error of all 16 drawn groups


def test_engine_fill_fraction_and_gradient_with_no_oversampling():
    """r = 1: the same draw as TPO. Fill fraction = TPO's informative share; at the first epoch TPO's all-equal
    groups have zero gradient, so refill's first gradient is TPO's times B / n_informative."""
    methods.register(methods.tpo_refill(1.0))
    try:
        B = 32
        tpo = train_tokens(TokenConfig(method="tpo", B=B, episodes=1, **TINY), seeds=(0,))
        ref = train_tokens(TokenConfig(method="tpo_refill_x1", B=B, episodes=1, **TINY), seeds=(0,))
        n_inf = round(B * (1 - float(tpo["zero_var_frac"][0, 0])))
        assert 0 < n_inf < B
        np.testing.assert_allclose(ref["fill_frac"][0, 0], n_inf / B)
        np.testing.assert_allclose(ref["error"], tpo["error"])
        np.testing.assert_allclose(ref["grad_norm"][0, 0], tpo["grad_norm"][0, 0] * B / n_inf, rtol=2e-3)
    finally:
        methods.REGISTRY.pop("tpo_refill_x1", None)
