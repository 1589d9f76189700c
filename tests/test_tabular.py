"""The multi-context tabular bandit (arXiv 2604.06159 §3.2, App. B): closed forms computed here, in numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tpo_core.lab import tabular as T

A = 10


# ---- closed forms, written out independently of tpo_core.lab.tabular ----------------------------------
def beta_closed_form(method, p, n_arms=A, eta=1.0):
    p = np.asarray(p, np.float64)
    if method == "ce":
        return np.ones_like(p)
    if method == "tpo":
        lam = np.exp(n_arms / (eta * np.sqrt(n_arms - 1)))
        return p * (lam - 1) / (1 - p + lam * p)
    if method == "grpo":
        return np.sqrt(p / (1 - p))
    return p * (1 / (1 + np.exp(np.log(p) / eta)))  # p · sigmoid(-log p / η): the DG gate on the correct arm


def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ---- β ------------------------------------------------------------------------------------------
def test_beta_at_p_one_tenth_matches_the_closed_forms_and_the_papers_rounding():
    expected = {m: float(beta_closed_form(m, 0.1)) for m in T.METHODS}
    for m in T.METHODS:
        np.testing.assert_allclose(float(T.beta(m, 0.1, A)), expected[m], rtol=1e-5)
    # the closed forms themselves round to the paper's quoted values at p = 0.1, A = 10
    assert round(expected["tpo"], 2) == 0.73 and round(expected["grpo"], 2) == 0.33
    assert round(expected["dg"], 2) == 0.09 and expected["ce"] == 1.0


def test_beta_over_a_grid_of_p_arms_and_temperatures():
    p = np.linspace(0.001, 0.999, 101)
    for n_arms in (2, 3, 10, 50):
        for eta in (0.5, 1.0, 2.0):
            for m in T.METHODS:
                np.testing.assert_allclose(
                    np.asarray(T.beta(m, p, n_arms, eta)), beta_closed_form(m, p, n_arms, eta), rtol=2e-4, atol=1e-6
                )


def test_tpo_lambda_is_about_28_for_ten_arms():
    np.testing.assert_allclose(float(T.tpo_lambda(10)), np.exp(10 / 3), rtol=1e-6)
    assert 28.0 < float(T.tpo_lambda(10)) < 28.1


# ---- the table and the exact update ------------------------------------------------------------------
def test_initial_logits_give_the_requested_probabilities_and_even_wrong_arms():
    p0 = np.array([1e-3, 0.1, 0.5, 0.9])
    pi = np.asarray(jax.nn.softmax(T.initial_logits(p0, A), -1))
    np.testing.assert_allclose(pi[:, 0], p0, rtol=1e-5)
    np.testing.assert_allclose(pi[:, 1:], np.repeat(((1 - p0) / (A - 1))[:, None], A - 1, 1), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(T.correct_prob(T.initial_logits(p0, A))), p0, rtol=1e-5)


def test_exact_update_is_beta_times_e0_minus_pi():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(7, A)).astype(np.float32)
    pi = softmax(z.astype(np.float64))
    e0 = np.eye(A)[0]
    for m in T.METHODS:
        expected = beta_closed_form(m, pi[:, 0])[:, None] * (e0 - pi)
        np.testing.assert_allclose(np.asarray(T.exact_update(jnp.asarray(z), m)), expected, atol=1e-6)


def test_normalised_step_has_length_alpha_and_a_zero_update_does_nothing():
    rng = np.random.default_rng(1)
    z = jnp.asarray(rng.normal(size=(5, A)), jnp.float32)
    g = jnp.asarray(rng.normal(size=(5, A)), jnp.float32) * 1e-7  # the scale of g does not matter
    new = T.normalised_step(z, g, 0.3)
    np.testing.assert_allclose(float(jnp.linalg.norm(new - z)), 0.3, rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(new - z), 0.3 * np.asarray(g) / np.linalg.norm(np.asarray(g)), rtol=1e-4, atol=1e-7
    )
    np.testing.assert_array_equal(np.asarray(T.normalised_step(z, jnp.zeros_like(z), 0.3)), np.asarray(z))


def test_step_shares_sum_to_one_and_follow_beta_squared():
    p0 = np.geomspace(1e-3, 0.5, 9)
    z = T.initial_logits(p0, A)
    for m in T.METHODS:
        shares = np.asarray(T.step_shares(z, m))
        # ‖e0 − π‖² = (1 − p)² A/(A − 1) with the wrong arms even
        weight = beta_closed_form(m, p0) ** 2 * (1 - p0) ** 2 * A / (A - 1)
        np.testing.assert_allclose(shares, weight / weight.sum(), rtol=1e-3)


def test_ce_misalignment_is_zero_for_ce_and_for_equal_contexts():
    z = T.initial_logits(np.geomspace(1e-3, 0.5, 9), A)
    assert abs(float(T.ce_misalignment(z, "ce"))) < 1e-6
    same = T.initial_logits(np.full(4, 0.2), A)  # equal p everywhere: every β is one scalar
    for m in T.METHODS:
        assert abs(float(T.ce_misalignment(same, m))) < 1e-6
        assert float(T.ce_misalignment(z, m)) >= -1e-6


def test_one_context_two_arms_every_method_follows_the_same_closed_form_path():
    # One context, A = 2: the normalised step is ±α/√2 on the two logits whatever β is, so the logit gap
    # grows by α√2 a step and p_t = sigmoid(gap_0 + t α √2) for every method.
    p0, alpha, steps = 0.01, 0.1, 60
    z = T.initial_logits(np.array([p0]), 2)
    gap0 = np.log(p0 / (1 - p0))
    expected = 1 / (1 + np.exp(-(gap0 + np.arange(steps + 1) * alpha * np.sqrt(2))))
    for m in T.METHODS:
        p = np.asarray(T.run_exact(z, m, alpha=alpha, steps=steps))[:, 0]
        np.testing.assert_allclose(p, expected, rtol=1e-4)


def test_steps_to_counts_rows_and_marks_never():
    hist = jnp.asarray([[0.1, 0.5, 0.2], [0.5, 0.995, 0.3], [0.991, 0.999, 0.4]])
    np.testing.assert_array_equal(np.asarray(T.steps_to(hist, 0.99)), [2.0, 1.0, np.inf])


def test_ce_reaches_threshold_first_overall_on_spread_contexts():
    z = T.initial_logits(np.geomspace(1e-3, 0.5, 20), A)
    steps = {m: np.asarray(T.steps_to(T.run_exact(z, m, alpha=0.3, steps=1500))) for m in T.METHODS}
    assert np.isfinite(steps["ce"]).all()
    for m in ("tpo", "grpo", "dg"):
        assert steps[m].max() >= steps["ce"].max(), (m, steps[m].max(), steps["ce"].max())


# ---- per-parameter Adam ----------------------------------------------------------------------------
def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def exact_update_closed_form(z, method, eta=1.0):
    pi = softmax(np.asarray(z, np.float64))
    return beta_closed_form(method, pi[:, 0], z.shape[-1], eta)[:, None] * (np.eye(z.shape[-1])[0] - pi)


def test_first_adam_update_is_lr_times_the_sign_of_g():
    rng = np.random.default_rng(4)
    z = jnp.asarray(rng.normal(size=(5, A)), jnp.float32)
    g = jnp.asarray(rng.normal(size=(5, A)) * 10.0 ** rng.uniform(-4, 2, size=(5, A)), jnp.float32)
    new, (m, v, t) = T.adam_step(z, g, T.adam_init(z), 0.01)
    np.testing.assert_allclose(np.asarray(new - z), 0.01 * np.sign(np.asarray(g)), rtol=1e-3, atol=1e-7)
    assert float(t) == 1.0


def test_second_adam_update_matches_the_hand_computed_moments():
    rng = np.random.default_rng(5)
    z = rng.normal(size=(3, 4))
    g1, g2 = rng.normal(size=(3, 4)), rng.normal(size=(3, 4)) * 0.1  # the second gradient is smaller
    lr, b1, b2, eps = 0.05, 0.9, 0.999, 1e-8
    m2 = b1 * (1 - b1) * g1 + (1 - b1) * g2
    v2 = b2 * (1 - b2) * g1**2 + (1 - b2) * g2**2
    expected = lr * (m2 / (1 - b1**2)) / (np.sqrt(v2 / (1 - b2**2)) + eps)
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    z1, state = T.adam_step(f32(z), f32(g1), T.adam_init(f32(z)), lr, b1, b2, eps)
    z2, _ = T.adam_step(z1, f32(g2), state, lr, b1, b2, eps)
    np.testing.assert_allclose(np.asarray(z2 - z1), expected, rtol=1e-4, atol=1e-7)
    # without momentum, a gradient 1000 times smaller than the first gets a step 1000·√((1 + b2)/b2) ≈ 707 times
    # shorter than lr: v̂ still remembers g1² (v̂₂ = (b2 g1² + g2²)/(1 + b2))
    zb, stb = T.adam_step(f32(z), f32(g1), T.adam_init(f32(z)), lr, 0.0, b2, eps)
    zc, _ = T.adam_step(zb, f32(g1 * 1e-3), stb, lr, 0.0, b2, eps)
    np.testing.assert_allclose(
        np.asarray(zc - zb), lr * 1e-3 * np.sign(g1) / np.sqrt((b2 + 1e-6) / (1 + b2)), rtol=1e-3
    )


def test_adam_run_matches_a_numpy_adam_on_the_closed_form_updates():
    p0 = np.array([1e-3, 0.05, 0.5])
    z = np.asarray(T.initial_logits(p0, A), np.float64)
    lr, b1, b2, eps, steps = 0.03, 0.9, 0.999, 1e-8, 40
    for method in T.METHODS:
        zz, m, v, ps = z.copy(), np.zeros_like(z), np.zeros_like(z), [softmax(z)[:, 0]]
        for t in range(1, steps + 1):
            g = exact_update_closed_form(zz, method)
            m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g**2
            zz = zz + lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
            ps.append(softmax(zz)[:, 0])
        got = np.asarray(T.run_exact(z, method, alpha=lr, steps=steps, optimizer="adam", b1=b1, b2=b2, eps=eps))
        np.testing.assert_allclose(got, np.array(ps), rtol=2e-4, atol=1e-6, err_msg=method)


def test_memoryless_adam_is_sign_descent_and_ignores_beta():
    # b1 = b2 = 0: every step is lr·sign(g); with A = 2 the logit gap grows by 2 lr a step whatever β is
    p0, lr, steps = 0.01, 0.05, 80
    z = T.initial_logits(np.array([p0]), 2)
    expected = sigmoid(np.log(p0 / (1 - p0)) + 2 * lr * np.arange(steps + 1))
    for m in T.METHODS:
        p = np.asarray(T.run_exact(z, m, alpha=lr, steps=steps, optimizer="adam", b1=0.0, b2=0.0))[:, 0]
        np.testing.assert_allclose(p, expected, rtol=1e-4)
    # and on a spread table all four methods take the identical path
    z = T.initial_logits(np.geomspace(1e-3, 0.5, 6), A)
    paths = [np.asarray(T.run_exact(z, m, alpha=lr, steps=100, optimizer="adam", b1=0.0, b2=0.0)) for m in T.METHODS]
    for path in paths[1:]:
        np.testing.assert_allclose(path, paths[0], rtol=1e-4, atol=1e-6)


def test_trace_reports_update_and_step_norms_per_context():
    p0 = np.geomspace(1e-3, 0.5, 5)
    z = T.initial_logits(p0, A)
    lr = 0.02
    for method in T.METHODS:
        tr = {k: np.asarray(v) for k, v in T.trace_exact(z, method, alpha=lr, steps=30, optimizer="adam").items()}
        assert tr["p"].shape == (31, 5) and tr["grad_norm"].shape == tr["step_norm"].shape == (30, 5)
        g0 = exact_update_closed_form(np.asarray(z, np.float64), method)
        np.testing.assert_allclose(tr["grad_norm"][0], np.linalg.norm(g0, axis=-1), rtol=1e-4)
        np.testing.assert_allclose(tr["step_norm"][0], lr * np.sqrt(A), rtol=1e-4)  # a sign step
        tr = {k: np.asarray(v) for k, v in T.trace_exact(z, method, alpha=0.1, steps=30).items()}
        np.testing.assert_allclose(np.sqrt((tr["step_norm"] ** 2).sum(1)), 0.1, rtol=1e-4)  # one shared length


def test_under_adam_a_gradient_that_fades_faster_gets_a_smaller_step():
    # CE's update fades like (1 - p), GRPO's like sqrt(p(1 - p)); at the same p near 1 Adam's step for CE is the
    # smaller one relative to its first step, because its remembered past gradients were larger
    z = T.initial_logits(np.array([0.5]), A)
    rel = {}
    for m in ("ce", "grpo"):
        tr = {k: np.asarray(v) for k, v in T.trace_exact(z, m, alpha=0.01, steps=3000, optimizer="adam").items()}
        t = int(np.argmax(tr["p"][:-1, 0] >= 0.99))
        rel[m] = tr["step_norm"][t, 0] / tr["step_norm"][0, 0]
    assert rel["ce"] < 0.5 * rel["grpo"], rel


# ---- sampled updates ----------------------------------------------------------------------------
def test_sampled_updates_match_the_group_gradients_written_out():
    rng = np.random.default_rng(2)
    z = jnp.asarray(rng.normal(size=(6, A)), jnp.float32)
    z = z.at[:, 0].set(2.0)  # the correct arm is often sampled
    key, k = jax.random.key(3), 8
    arms = np.asarray(T.sample_arms(key, z, k))  # the same draws sampled_update makes
    zs = np.asarray(z, np.float64)
    logpi = np.log(softmax(zs))
    c = zs.shape[0]
    tpo_expected = np.zeros_like(zs)
    grpo_expected = np.zeros_like(zs)
    for ci in range(c):
        s = (arms[ci] == 0).astype(np.float64)
        lp = logpi[ci, arms[ci]]
        cen = s - s.mean()
        sd = np.sqrt((cen**2).mean())
        u = cen / sd if sd > 1e-6 else cen
        p = softmax(lp)
        q = softmax(np.log(p) + u)
        adv = cen / (sd + 1e-8)
        for i, a in enumerate(arms[ci]):
            tpo_expected[ci, a] += (q[i] - p[i]) / c  # -∂/∂z of the mean over contexts of -Σ q log p
            grpo_expected[ci] += adv[i] * (np.eye(A)[a] - softmax(zs[ci])) / c  # Σ_i A_i ∇ log π(a_i)
    np.testing.assert_allclose(np.asarray(T.sampled_update(key, z, "tpo", k)), tpo_expected, atol=1e-5)
    np.testing.assert_allclose(np.asarray(T.sampled_update(key, z, "grpo", k)), grpo_expected, atol=1e-4)


def test_sample_arms_follow_the_policy():
    z = T.initial_logits(np.array([0.3, 0.05]), 4)
    arms = np.asarray(T.sample_arms(jax.random.key(0), jnp.repeat(z, 1, 0), 20000))
    np.testing.assert_allclose((arms == 0).mean(1), [0.3, 0.05], atol=0.01)
    assert arms.min() >= 0 and arms.max() <= 3


def test_all_equal_groups_give_no_sampled_update():
    z = jnp.asarray([[-40.0] + [0.0] * (A - 1), [40.0] + [0.0] * (A - 1)])  # never / always correct
    for m in T.SAMPLED_METHODS:
        np.testing.assert_allclose(np.asarray(T.sampled_update(jax.random.key(0), z, m, 8)), 0.0, atol=1e-7)


def test_run_sampled_vmaps_over_seeds_and_methods_and_learns():
    z = T.initial_logits(np.array([0.2, 0.5]), A)
    keys = jax.random.split(jax.random.key(0), 3)
    out = T.run_sampled(keys, z, ("tpo", "grpo"), k=8, alpha=0.3, steps=200)
    assert set(out) == {"tpo", "grpo"}
    for m, p in out.items():
        p = np.asarray(p)
        assert p.shape == (3, 201, 2)
        np.testing.assert_allclose(p[:, 0], np.repeat([[0.2, 0.5]], 3, 0), rtol=1e-5)
        assert (p[:, -1] > 0.9).all(), (m, p[:, -1])
    assert not np.allclose(np.asarray(out["tpo"][0]), np.asarray(out["tpo"][1]))  # seeds differ
    single = T.run_sampled(keys[:1], z, "tpo", k=8, alpha=0.3, steps=200)
    np.testing.assert_allclose(np.asarray(single["tpo"][0]), np.asarray(out["tpo"][0]), rtol=1e-5)


# ---- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: T.beta("ppo", 0.1), "method"),
        (lambda: T.beta("tpo", 0.1, n_arms=1), "n_arms"),
        (lambda: T.tpo_lambda(10, eta=0.0), "eta"),
        (lambda: T.initial_logits(np.array([0.0, 0.5])), "p0"),
        (lambda: T.initial_logits(np.ones((2, 2)) * 0.5), "p0"),
        (lambda: T.normalised_step(jnp.zeros((1, 2)), jnp.ones((1, 2)), -1.0), "alpha"),
        (lambda: T.run_exact(jnp.zeros((1, 2)), "tpo", steps=0), "steps"),
        (lambda: T.run_exact(jnp.zeros((1, 2)), "tpo", optimizer="sgd"), "optimizer"),
        (lambda: T.trace_exact(jnp.zeros((1, 2)), "tpo", optimizer="adam", b2=1.0), "b2"),
        (lambda: T.steps_to(jnp.zeros((2, 1)), threshold=1.0), "threshold"),
        (lambda: T.sampled_update(jax.random.key(0), jnp.zeros((1, 2)), "dg", 4), "method"),
        (lambda: T.run_sampled(jax.random.split(jax.random.key(0), 2), jnp.zeros((1, 2)), "tpo", k=1), "k"),
        (lambda: T.run_sampled(jax.random.split(jax.random.key(0), 2), jnp.zeros((1, 2)), ("tpo", "ce")), "method"),
        (lambda: T.run_sampled(jax.random.key(0), jnp.zeros((1, 2)), "tpo"), "keys"),
    ],
)
def test_bad_input_raises_value_error_naming_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()
