"""The math of the paper (arXiv 2604.06159) §2–3, checked on the implemented losses."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tpo_core
from tpo_core import losses as L

jax.config.update("jax_enable_x64", False)
RNG = np.random.default_rng(0)


def _group(b=5, k=8, seed=0):
    rng = np.random.default_rng(seed)
    return (
        jnp.asarray(rng.normal(size=(b, k)), jnp.float32),
        jnp.asarray(rng.normal(size=(b, k)), jnp.float32),
        jnp.asarray(rng.integers(0, 2, size=(b, k)), jnp.float32),
    )


# ---- standardisation ------------------------------------------------------------------------
def test_standardize_population_std_and_zero_variance():
    s = jnp.array([[1.0, 0.0, 0.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    u = np.asarray(tpo_core.standardize(s))
    c = np.array([0.75, -0.25, -0.25, -0.25])
    np.testing.assert_allclose(u[0], c / np.sqrt((c**2).mean()), rtol=1e-6)  # ddof = 0
    assert np.all(u[1] == 0.0)  # all-equal -> exactly 0


def test_standardize_one_hot_over_ten_classes_is_three_and_minus_a_third():
    u = np.asarray(tpo_core.standardize(jax.nn.one_hot(4, 10)))
    np.testing.assert_allclose(u[4], 3.0, rtol=1e-6)
    np.testing.assert_allclose(np.delete(u, 4), -1 / 3, rtol=1e-6)


# ---- TPO's target and gradient ----------------------------------------------------------------
def test_gradient_of_tpo_loss_is_p_minus_q():
    logp, logp_old, scores = _group()
    grad = jax.grad(tpo_core.tpo_loss)(logp, logp_old, scores, 0.7)
    p = jax.nn.softmax(logp, -1)
    q = tpo_core.tpo_target(logp_old, scores, 0.7)
    # leading axis averaged: each group's gradient is (p - q) / B
    np.testing.assert_allclose(grad * logp.shape[0], p - q, atol=1e-6)


def test_gradient_vanishes_at_the_fixed_point():
    _, logp_old, scores = _group()
    q = tpo_core.tpo_target(logp_old, scores, 1.0)
    grad = jax.grad(tpo_core.tpo_loss)(jnp.log(q), logp_old, scores, 1.0)
    np.testing.assert_allclose(grad, 0.0, atol=1e-7)


def _objective(r, u, p_old, eta):
    return (r * u).sum(-1) - eta * (r * (jnp.log(r) - jnp.log(p_old))).sum(-1)


@pytest.mark.parametrize("eta", [0.1, 1.0, 5.0])
def test_target_maximises_the_kl_regularised_objective(eta):
    _, logp_old, scores = _group(b=3, k=6, seed=1)
    p_old = jax.nn.softmax(logp_old, -1)
    u = tpo_core.standardize(scores)
    q = tpo_core.tpo_target(logp_old, scores, eta)
    best = _objective(q, u, p_old, eta)
    rng = np.random.default_rng(2)
    for scale in (1e-3, 1e-1, 1.0):  # random perturbations staying on the simplex
        for _ in range(50):
            r = jax.nn.softmax(jnp.log(q) + scale * rng.normal(size=q.shape), -1)
            assert np.all(np.asarray(_objective(r, u, p_old, eta)) <= np.asarray(best) + 1e-6)
    # and the closed form is the unique stationary point: q ∝ p_old exp(u/eta)
    np.testing.assert_allclose(
        q, p_old * jnp.exp(u / eta) / (p_old * jnp.exp(u / eta)).sum(-1, keepdims=True), rtol=1e-5
    )


def test_all_equal_scores_give_q_equal_to_p_old():
    _, logp_old, _ = _group()
    q = tpo_core.tpo_target(logp_old, jnp.full(logp_old.shape, 0.3), 1.0)
    np.testing.assert_allclose(q, jax.nn.softmax(logp_old, -1), atol=1e-7)


@pytest.mark.parametrize("a,b", [(2.0, 0.0), (0.01, -3.0), (1e3, 7.0)])
def test_target_invariant_to_positive_affine_rescaling(a, b):
    _, logp_old, scores = _group()
    scores = scores + 0.1 * jnp.arange(scores.shape[-1])
    np.testing.assert_allclose(
        tpo_core.tpo_target(logp_old, a * scores + b), tpo_core.tpo_target(logp_old, scores), atol=2e-5
    )  # float32 rounding of a·s + b


def test_permutation_equivariance():
    logp, logp_old, scores = _group()
    perm = np.random.default_rng(3).permutation(logp.shape[-1])
    q = tpo_core.tpo_target(logp_old, scores)
    np.testing.assert_allclose(tpo_core.tpo_target(logp_old[:, perm], scores[:, perm]), q[:, perm], atol=1e-7)
    np.testing.assert_allclose(
        tpo_core.tpo_loss(logp[:, perm], logp_old[:, perm], scores[:, perm]),
        tpo_core.tpo_loss(logp, logp_old, scores),
        rtol=1e-6,
    )


def test_eta_limits():
    _, logp_old, scores = _group()
    np.testing.assert_allclose(tpo_core.tpo_target(logp_old, scores, 1e4), jax.nn.softmax(logp_old, -1), atol=1e-3)
    q = tpo_core.tpo_target(logp_old, scores, 1e-3)
    best = scores == scores.max(-1, keepdims=True)
    informative = np.asarray(scores.std(-1) > 0)
    np.testing.assert_allclose(np.asarray((q * best).sum(-1))[informative], 1.0, atol=1e-5)


def test_no_anchor_target_ignores_p_old():
    _, logp_old, scores = _group()
    q = tpo_core.tpo_target(logp_old, scores, 1.0, anchor=False)
    np.testing.assert_allclose(q, jax.nn.softmax(tpo_core.standardize(scores), -1), atol=1e-7)


# ---- the one-hot bandit coefficients of the paper, §2 ----------------------------------------------
A_CLASSES = 10


def _pi(p, y=0, a=A_CLASSES):
    pi = np.full(a, (1 - p) / (a - 1))
    pi[y] = p
    return pi


@pytest.mark.parametrize("p", [0.05, 0.1, 0.5, 0.9])
def test_beta_tpo(p):
    """Group = all A classes, score = 1{class = y}: -∂L/∂logits = β_TPO (e_y − π)."""
    pi = _pi(p)
    logits = jnp.log(jnp.asarray(pi, jnp.float32))
    scores = jax.nn.one_hot(0, A_CLASSES)
    g = -jax.grad(lambda z: tpo_core.tpo_loss(z, jax.lax.stop_gradient(z), scores))(logits)
    lam = np.exp(A_CLASSES / np.sqrt(A_CLASSES - 1))
    beta = p * (lam - 1) / (1 - p + lam * p)
    np.testing.assert_allclose(g, beta * (np.eye(A_CLASSES)[0] - pi), atol=1e-5)


def test_beta_values_quoted_at_p_point_one_come_out_of_the_implemented_losses():
    """The paper quotes β_TPO 0.73, β_GRPO 0.33, β_DG 0.09 at p = 0.1: measure them from the losses' gradients
    as the coefficient of (e_y − π)."""
    p = 0.1
    pi = _pi(p)
    e = np.eye(A_CLASSES)[0] - pi
    logits = jnp.log(jnp.asarray(pi, jnp.float32))
    g_tpo = -jax.grad(lambda z: tpo_core.tpo_loss(z, jax.lax.stop_gradient(z), jax.nn.one_hot(0, A_CLASSES)))(logits)
    counts = np.round(pi * 90).astype(int)
    actions = np.repeat(np.arange(A_CLASSES), counts)
    scores = jnp.asarray(actions == 0, jnp.float32)[None]
    g_grpo = (
        -jax.grad(
            lambda z: L.grpo_loss(
                jax.nn.log_softmax(z)[actions][None],
                jax.lax.stop_gradient(jax.nn.log_softmax(z)[actions][None]),
                scores,
            )
        )(logits)
        / counts.sum()
    )
    reward = jax.nn.one_hot(0, A_CLASSES)
    g_dg = -jax.grad(
        lambda z: (
            jnp.asarray(pi, jnp.float32)
            * jax.vmap(lambda lp, a: L.dg_loss(lp[None, None], a[None, None], 1.0))(jax.nn.log_softmax(z), reward)
        ).sum()
    )(logits)
    coef = lambda g: float(np.dot(np.asarray(g), e) / np.dot(e, e))  # noqa: E731
    assert round(coef(g_tpo), 2) == 0.73 and round(coef(g_grpo), 2) == 0.33 and round(coef(g_dg), 2) == 0.09


@pytest.mark.parametrize("p", [0.1, 0.3, 0.6])
def test_beta_grpo(p):
    """A group whose classes appear in proportion to π is the population: its first-epoch GRPO gradient
    (ρ = 1, KL term zero) per sample is β_GRPO (e_y − π)."""
    counts = np.round(_pi(p) * 90).astype(int)  # p·90 and (1-p)/9·90 are integers for these p
    actions = np.repeat(np.arange(A_CLASSES), counts)
    pi = counts / counts.sum()
    logits = jnp.log(jnp.asarray(pi, jnp.float32))
    scores = jnp.asarray(actions == 0, jnp.float32)[None]

    def loss(z):
        lp = jax.nn.log_softmax(z)[actions][None]
        return L.grpo_loss(lp, jax.lax.stop_gradient(lp), scores)

    g = -jax.grad(loss)(logits) / counts.sum()
    beta = np.sqrt(pi[0] / (1 - pi[0]))
    np.testing.assert_allclose(g, beta * (np.eye(A_CLASSES)[0] - pi), atol=1e-4)


@pytest.mark.parametrize("p", [0.1, 0.4, 0.8])
def test_beta_dg(p):
    """Exact population DG update with the one-hot reward as advantage (η = 1): β_DG = p/(1+p)."""
    pi = jnp.asarray(_pi(p), jnp.float32)
    reward = jax.nn.one_hot(0, A_CLASSES)

    def loss(z):
        lp = jax.nn.log_softmax(z)
        per_action = jax.vmap(lambda lp, a: L.dg_loss(lp[None, None], a[None, None], 1.0))(lp, reward)
        return (pi * per_action).sum()  # expectation over a ~ π

    g = -jax.grad(loss)(jnp.log(pi))
    np.testing.assert_allclose(g, p / (1 + p) * (np.eye(A_CLASSES)[0] - np.asarray(pi)), atol=1e-5)


# ---- GRPO, RLOO and friends ----------------------------------------------------------------------
def test_grpo_first_epoch_gradient_equals_z_scored_pg():
    logp, _, scores = _group(seed=4)
    z = (scores - scores.mean(-1, keepdims=True)) / (scores.std(-1, keepdims=True) + 1e-8)
    g_grpo = jax.grad(lambda lp: L.grpo_loss(lp, jax.lax.stop_gradient(lp), scores))(logp)
    g_pg = jax.grad(lambda lp: -(z * lp).sum(-1).mean())(logp)
    np.testing.assert_allclose(g_grpo, g_pg, atol=1e-6)


def test_grpo_clips_and_masks():
    logp_old = jnp.zeros((2, 4))
    scores = jnp.array([[1.0, 0, 0, 0], [0.0, 0, 0, 0]])
    adv = L.grpo_advantages(scores)
    far = logp_old + jnp.array([[1.0, 0, 0, 0], [0, 0, 0, 0]])  # ratio e > 1.2 on the positive sample
    g = jax.grad(lambda lp: L.grpo_loss(lp, logp_old, scores, beta=0.0))(far)
    assert g[0, 0] == 0.0 and adv[0, 0] > 0  # clipped: no push beyond 1 + ε
    masked = L.grpo_loss(logp_old, logp_old, scores, beta=0.0, mask_zero_var=True)
    unmasked = L.grpo_loss(logp_old, logp_old, scores, beta=0.0)
    np.testing.assert_allclose(masked, 2 * unmasked, rtol=1e-6)  # mean over 1 informative group, not 2


def test_grpo_trl_flavour_uses_sample_std_and_token_ratios():
    rng = np.random.default_rng(5)
    tok = jnp.asarray(rng.normal(size=(3, 4, 5)), jnp.float32)
    scores = jnp.asarray(rng.integers(0, 2, size=(3, 4)), jnp.float32)
    a = L.grpo_advantages(scores, ddof=1)
    g = jax.grad(lambda t: L.grpo_token_ratio_loss(t, jax.lax.stop_gradient(t), scores))(tok)
    # first epoch: -∂/∂ℓ_t = A / (T · K · B) for every token of a completion
    np.testing.assert_allclose(-g, np.broadcast_to(np.asarray(a)[..., None] / (5 * 4 * 3), tok.shape), atol=1e-6)


def test_rloo_identity():
    _, _, scores = _group(seed=6)
    a = np.asarray(L.rloo_advantages(scores))
    s = np.asarray(scores)
    k = s.shape[-1]
    loo = s - (s.sum(-1, keepdims=True) - s) / (k - 1)
    np.testing.assert_allclose(a, loo, atol=1e-6)


def test_rebel_zero_at_its_solution_and_vmpo_finite():
    logp_old = jnp.zeros((2, 4))
    scores = jnp.array([[1.0, 0, 0, 0.5], [0.0, 1, 0, 0]])
    eta = 0.5
    # log-ratio differences equal eta × reward differences -> zero loss
    np.testing.assert_allclose(L.rebel_loss(logp_old + eta * scores, logp_old, scores, eta), 0.0, atol=1e-10)
    assert L.rebel_loss(logp_old, logp_old, scores, eta) > 0
    v = L.vmpo_loss(logp_old, logp_old, scores, jnp.zeros(()), jnp.zeros(()))
    assert np.isfinite(v)


def test_dapo_drops_zero_variance_groups_from_the_token_mean():
    """Off-policy (ρ ≠ 1), so the loss is not 0: an all-equal group has A = 0, and dropping it changes the
    token-level mean's denominator. DAPO with it equals DAPO on the informative group alone; closed form:
    −mean over the kept tokens of min(ρA, clip(ρ, 0.8, 1.28)A)."""
    rng = np.random.default_rng(3)
    old = jnp.asarray(rng.normal(size=(2, 4, 3)), jnp.float32)
    new = old + jnp.asarray(rng.normal(scale=0.3, size=(2, 4, 3)), jnp.float32)
    scores = jnp.array([[1.0, 0, 0, 0], [0.0, 0, 0, 0]])
    both = L.dapo_loss(new, old, scores)
    alone = L.dapo_loss(new[:1], old[:1], scores[:1])
    np.testing.assert_allclose(both, alone, rtol=1e-6)
    s0 = np.asarray(scores[0])
    a = (s0 - s0.mean()) / (s0.std() + 1e-8)
    rho = np.exp(np.asarray(new[0] - old[0]))
    per = np.minimum(rho * a[:, None], np.clip(rho, 0.8, 1.28) * a[:, None])
    np.testing.assert_allclose(alone, -per.mean(), rtol=1e-5)
    kept_and_dropped_mean = -np.concatenate([per.ravel(), np.zeros(12)]).mean()  # what keeping would give
    assert not np.isclose(float(both), kept_and_dropped_mean)


def test_masked_grpo_drops_the_all_fail_groups_kl_pull():
    """Off the rollout (later epochs), an all-fail group still contributes β·k3 (a pull back toward the rollout
    snapshot); masking removes it and averages over informative groups only. Closed forms in numpy."""
    rng = np.random.default_rng(4)
    old = jnp.asarray(rng.normal(size=(2, 4)), jnp.float32)
    new = old + jnp.asarray(rng.normal(scale=0.5, size=(2, 4)), jnp.float32)
    scores = jnp.array([[1.0, 0, 0, 0], [0.0, 0, 0, 0]])
    beta, eps = 0.04, 0.2

    def group_loss(i):
        s = np.asarray(scores[i])
        a = (s - s.mean()) / (s.std() + 1e-8)
        rho = np.exp(np.asarray(new[i] - old[i]))
        log_r = np.asarray(old[i] - new[i])
        k3 = np.exp(log_r) - 1 - log_r
        return -(np.minimum(rho * a, np.clip(rho, 1 - eps, 1 + eps) * a) - beta * k3).sum()

    np.testing.assert_allclose(L.grpo_loss(new, old, scores), (group_loss(0) + group_loss(1)) / 2, rtol=1e-5)
    np.testing.assert_allclose(L.grpo_loss(new, old, scores, mask_zero_var=True), group_loss(0), rtol=1e-5)
    assert group_loss(1) > 0  # the all-fail group's loss is the KL pull alone


def test_off_policy_grpo_value_and_gradient_with_ratio_away_from_one():
    old = jnp.zeros((1, 3))
    new = jnp.array([[0.1, 0.4, 0.3]])  # ρ = e^0.1 (inside), e^0.4 and e^0.3 (both > 1.2)
    scores = jnp.array([[1.0, 0.0, 1.0]])
    s = np.asarray(scores[0])
    a = (s - s.mean()) / (s.std() + 1e-8)  # (+0.707, −1.414, +0.707)
    rho = np.exp(np.asarray(new[0]))
    surr = np.minimum(rho * a, np.clip(rho, 0.8, 1.2) * a)
    np.testing.assert_allclose(L.grpo_loss(new, old, scores, beta=0.0), -surr.sum(), rtol=1e-5)
    g = np.asarray(jax.grad(lambda lp: L.grpo_loss(lp, old, scores, beta=0.0))(new))[0]
    # d(−ρA)/dℓ = −ρA where min picks ρA: inside the clip range, and for A < 0 with ρ > 1 + ε (the pessimistic
    # side is never clipped); A > 0 with ρ > 1 + ε is clipped and carries no gradient
    expect = np.array([-rho[0] * a[0], -rho[1] * a[1], 0.0])
    np.testing.assert_allclose(g, expect, rtol=1e-5, atol=1e-7)


def test_k3_estimator_closed_form_and_mean_is_the_kl():
    lp, lr = jnp.log(jnp.array([0.5, 0.25])), jnp.log(jnp.array([0.25, 0.5]))
    r = np.array([0.5, 2.0])  # π_ref / π_θ
    np.testing.assert_allclose(L.k3_kl(lp, lr), r - 1 - np.log(r), rtol=1e-6)
    # E_{a~π_θ}[k3] = KL(π_θ‖π_ref) exactly, for two full distributions
    p_theta, p_ref = np.array([0.7, 0.2, 0.1]), np.array([0.3, 0.3, 0.4])
    k3 = np.asarray(L.k3_kl(jnp.log(jnp.asarray(p_theta)), jnp.log(jnp.asarray(p_ref))))
    np.testing.assert_allclose((p_theta * k3).sum(), (p_theta * np.log(p_theta / p_ref)).sum(), rtol=1e-5)


def test_single_sample_losses_against_closed_forms():
    rng = np.random.default_rng(7)
    tok = jnp.asarray(np.log(rng.uniform(0.05, 0.95, size=(4, 5))), jnp.float32)  # log π(a_t), [B, T]
    old = tok + jnp.asarray(rng.normal(scale=0.2, size=(4, 5)), jnp.float32)
    rewards = jnp.asarray(rng.integers(0, 2, size=(4, 5)), jnp.float32)
    r = np.asarray(rewards)
    adv = r - r.mean(0, keepdims=True)
    np.testing.assert_allclose(L.batch_baseline_advantages(rewards), adv, atol=1e-7)
    t, o = np.asarray(tok), np.asarray(old)
    np.testing.assert_allclose(L.pg_loss(tok, adv), -(adv * t).sum(1).mean(), rtol=1e-6)
    rho = np.exp(t - o)
    np.testing.assert_allclose(
        L.ppo_loss(tok, old, adv), -np.minimum(rho * adv, np.clip(rho, 0.8, 1.2) * adv).sum(1).mean(), rtol=1e-5
    )
    w = 1 / (1 + np.exp(-adv * (-t) / 1.0))
    np.testing.assert_allclose(L.dg_weights(tok, adv, 1.0), w, rtol=1e-6)
    np.testing.assert_allclose(L.dg_loss(tok, adv, 1.0), -(w * adv * t).sum(1).mean(), rtol=1e-5)
    g = np.asarray(jax.grad(lambda x: L.dg_loss(x, adv, 1.0))(tok))
    np.testing.assert_allclose(g, -(w * adv) / 4, rtol=1e-5)  # the gate is a stop-gradient weight


def test_group_pg_and_tpo_token_against_closed_forms():
    rng = np.random.default_rng(8)
    logp = jnp.asarray(rng.normal(size=(3, 6)), jnp.float32)
    scores = jnp.asarray(rng.integers(0, 3, size=(3, 6)), jnp.float32)
    s = np.asarray(scores)
    c = s - s.mean(-1, keepdims=True)
    sd = np.sqrt((c**2).mean(-1, keepdims=True))
    u = np.where(sd > 1e-6, c / np.where(sd > 1e-6, sd, 1), c)
    np.testing.assert_allclose(
        L.group_pg_loss(logp, scores, 2.0), -((u / 2.0) * np.asarray(logp)).sum(-1).mean(), rtol=1e-5
    )
    cand = jnp.asarray(rng.normal(size=(2, 3, 4)), jnp.float32)  # [B, H, K] candidate log-probs
    cand_old = jnp.asarray(rng.normal(size=(2, 3, 4)), jnp.float32)
    cr = jnp.asarray(rng.integers(0, 2, size=(2, 3, 4)), jnp.float32)
    x, xo, rr = np.asarray(cand), np.asarray(cand_old), np.asarray(cr)
    cc = rr - rr.mean(-1, keepdims=True)
    sdc = np.sqrt((cc**2).mean(-1, keepdims=True))
    uu = np.where(sdc > 1e-6, cc / np.where(sdc > 1e-6, sdc, 1), cc)
    lq = xo - np.log(np.exp(xo).sum(-1, keepdims=True)) + uu
    q = np.exp(lq - lq.max(-1, keepdims=True))
    q /= q.sum(-1, keepdims=True)
    logp_x = x - np.log(np.exp(x).sum(-1, keepdims=True))
    np.testing.assert_allclose(L.tpo_token_loss(cand, cand_old, cr), -(q * logp_x).sum(-1).mean(), rtol=1e-5)


def test_mnist_bandit_adapters_against_closed_forms():
    """The bandit's TPO group is all 10 classes: u_a = 3·sign(A), u_j = −sign(A)/3; q = softmax(log π + u)."""
    from tpo_core import methods

    rng = np.random.default_rng(9)
    logits = jnp.asarray(rng.normal(size=(4, 10)), jnp.float32)
    actions = jnp.array([0, 3, 7, 9])
    labels = jnp.array([0, 1, 7, 2])
    adv = jnp.array([0.5, -0.2, 0.0, -0.9])
    z = np.asarray(logits)
    logpi = z - np.log(np.exp(z).sum(-1, keepdims=True))
    sgn = np.sign(np.asarray(adv))
    u = np.tile(-sgn[:, None] / 3, (1, 10))
    u[np.arange(4), np.asarray(actions)] = 3 * sgn
    q = np.exp(logpi + u)
    q /= q.sum(-1, keepdims=True)
    hp = {"eta": 1.0}
    tpo = methods.get("tpo").bandit(logits, actions, labels, adv, hp)
    np.testing.assert_allclose(tpo, -(q * logpi).sum(-1).mean(), rtol=1e-5)
    picked = logpi[np.arange(4), np.asarray(actions)]
    gpg = methods.get("group_pg").bandit(logits, actions, labels, adv, hp)
    np.testing.assert_allclose(gpg, -(3 * sgn * picked).mean(), rtol=1e-5)
    rwd = (np.asarray(actions) == np.asarray(labels)).astype(float)
    zr = (rwd - rwd.mean()) / (rwd.std() + 1e-8)
    grpo = methods.get("grpo").bandit(logits, actions, labels, adv, hp)
    np.testing.assert_allclose(grpo, -(zr * picked).mean(), rtol=1e-5)
    pg = methods.get("pg").bandit(logits, actions, labels, adv, hp)
    np.testing.assert_allclose(pg, -(np.asarray(adv) * picked).mean(), rtol=1e-5)


# ---- robustness ----------------------------------------------------------------------------------
@jax.jit
def _everything(logp, logp_old, scores, eta):
    q = tpo_core.tpo_target(logp_old, scores, eta)
    loss, grad = jax.value_and_grad(tpo_core.tpo_loss)(logp, logp_old, scores, eta)
    g_loss, g_grad = jax.value_and_grad(L.grpo_loss)(logp, logp_old, scores)
    return q, loss, grad, g_loss, g_grad


@settings(max_examples=25, deadline=None)
@given(
    k=st.integers(2, 1024), eta=st.floats(1e-3, 1e3), scale=st.sampled_from([1.0, 1e2, 1e4]), seed=st.integers(0, 2**16)
)
def test_no_nan_or_inf_at_extreme_inputs(k, eta, scale, seed):
    rng = np.random.default_rng(seed)
    logp = jnp.asarray(np.clip(rng.normal(size=(2, k)) * scale, -1e4, 1e4), jnp.float32)
    logp_old = jnp.asarray(np.clip(rng.normal(size=(2, k)) * scale, -1e4, 1e4), jnp.float32)
    scores = jnp.asarray(rng.normal(size=(2, k)) * scale, jnp.float32)
    q, loss, grad, g_loss, g_grad = _everything(logp, logp_old, scores, eta)
    assert np.all(np.isfinite(q)) and np.allclose(np.asarray(q).sum(-1), 1.0, atol=1e-4)
    assert np.isfinite(loss) and np.all(np.isfinite(grad))
    assert np.isfinite(g_loss) and np.all(np.isfinite(g_grad))


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: tpo_core.tpo_target(jnp.zeros((2, 4)), jnp.zeros((2, 4)), 0.0), "eta"),
        (lambda: tpo_core.tpo_target(jnp.zeros((2, 4)), jnp.zeros((2, 4)), -1.0), "eta"),
        (lambda: tpo_core.tpo_loss(jnp.zeros((2, 1)), jnp.zeros((2, 1)), jnp.zeros((2, 1))), "K >= 2"),
        (lambda: tpo_core.tpo_loss(jnp.zeros((2, 4)), jnp.zeros((2, 3)), jnp.zeros((2, 4))), "shapes disagree"),
        (lambda: tpo_core.get_method("nope"), "unknown method"),
        (lambda: tpo_core.TokenConfig(K=1), "K"),
        (lambda: tpo_core.TokenConfig(eta=0), "eta"),
        (lambda: tpo_core.TokenConfig(reward="dense"), "reward"),
        (lambda: tpo_core.TokenConfig(target="sideways"), "target"),
        (lambda: tpo_core.TokenConfig(method="tpo_token", reward="terminal"), "reward"),
        (lambda: tpo_core.BanditConfig(method="ppo"), "method"),
    ],
)
def test_bad_input_raises_value_error_naming_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_losses_jit_and_vmap():
    logp, logp_old, scores = _group()
    f = jax.jit(jax.vmap(lambda a, b, c: tpo_core.tpo_loss(a[None], b[None], c[None])))
    np.testing.assert_allclose(f(logp, logp_old, scores).mean(), tpo_core.tpo_loss(logp, logp_old, scores), rtol=1e-6)
    # eta may be traced (the demo sweeps it without recompiling)
    g = jax.jit(lambda e: tpo_core.tpo_target(logp_old, scores, e))
    np.testing.assert_allclose(g(2.0), tpo_core.tpo_target(logp_old, scores, 2.0), atol=1e-7)
