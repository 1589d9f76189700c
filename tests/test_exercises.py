"""The exercise checkers accept a correct function written here from the formulas and reject typical bugs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tpo_core.lab import exercises as X


# --------------------------------------------------------------------------------------------
# correct implementations, written from the closed forms (not from tpo_core)
# --------------------------------------------------------------------------------------------
def np_standardize(scores):
    s = np.asarray(scores, np.float64)
    c = s - s.mean(-1, keepdims=True)
    sigma = np.sqrt((c**2).mean(-1, keepdims=True))
    return np.where(sigma > 1e-6, c / np.where(sigma > 1e-6, sigma, 1.0), c)


def np_softmax(z, axis=-1):
    z = np.asarray(z, np.float64)
    e = np.exp(z - z.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def np_target(logp_old, scores, eta):
    return np_softmax(np.asarray(logp_old, np.float64) + np_standardize(scores) / eta)  # softmax is shift-invariant


def jnp_u(scores):
    c = scores - scores.mean(-1, keepdims=True)
    sigma = jnp.sqrt((c**2).mean(-1, keepdims=True))
    return jnp.where(sigma > 1e-6, c / jnp.where(sigma > 1e-6, sigma, 1.0), c)


def jnp_tpo_loss(logp, logp_old, scores, eta):
    q = jax.nn.softmax(logp_old + jnp_u(scores) / eta)  # no gradient: depends on logp_old only
    return -(q * jax.nn.log_softmax(logp)).sum(-1).mean()


def np_grpo_adv(scores):
    s = np.asarray(scores, np.float64)
    c = s - s.mean(-1, keepdims=True)
    return c / (np.sqrt((c**2).mean(-1, keepdims=True)) + 1e-8)


def np_k3(logp, logp_ref):
    log_r = np.asarray(logp_ref, np.float64) - np.asarray(logp, np.float64)
    return np.exp(log_r) - 1.0 - log_r


def np_seq_logp(token_logp, mask):
    return (np.asarray(token_logp, np.float64) * np.asarray(mask, np.float64)).sum(-1)


def np_candidate_rewards(cand_correct, behaviour_correct, reward):
    c = np.asarray(cand_correct, np.float64)
    if reward == "bag":
        return c
    b = np.asarray(behaviour_correct, bool)
    out = np.zeros_like(c)
    for i in range(b.shape[0]):
        for t in range(b.shape[1]):
            out[i, t] = c[i, t] * float(b[i, :t].all())  # every behaviour token before t right
    return out


# --------------------------------------------------------------------------------------------
# typical bugs
# --------------------------------------------------------------------------------------------
def sample_std_standardize(scores):
    c = scores - scores.mean(-1, keepdims=True)
    sigma = jnp.std(c, -1, ddof=1, keepdims=True)
    return jnp.where(sigma > 1e-6, c / jnp.where(sigma > 1e-6, sigma, 1.0), c)


def no_floor_standardize(scores):
    c = scores - scores.mean(-1, keepdims=True)
    return c / jnp.sqrt((c**2).mean(-1, keepdims=True))


def batch_axis_standardize(scores):
    c = scores - scores.mean(0, keepdims=True)  # mean over the wrong axis
    sigma = jnp.sqrt((c**2).mean(0, keepdims=True))
    return jnp.where(sigma > 1e-6, c / jnp.where(sigma > 1e-6, sigma, 1.0), c)


def wrong_axis_target(logp_old, scores, eta):
    return jax.nn.softmax(jax.nn.log_softmax(logp_old, -1) + jnp_u(scores) / eta, axis=0)


def no_anchor_target(logp_old, scores, eta):
    return jax.nn.softmax(jnp_u(scores) / eta)


def times_eta_target(logp_old, scores, eta):
    return jax.nn.softmax(logp_old + jnp_u(scores) * eta)


def sample_std_target(logp_old, scores, eta):
    return jax.nn.softmax(logp_old + sample_std_standardize(scores) / eta)


def no_stop_gradient_loss(logp, logp_old, scores, eta):
    q = jax.nn.softmax(logp + jnp_u(scores) / eta)  # q follows the current policy: not frozen
    return -(q * jax.nn.log_softmax(logp)).sum(-1).mean()


def summed_loss(logp, logp_old, scores, eta):
    q = jax.nn.softmax(logp_old + jnp_u(scores) / eta)
    return -(q * jax.nn.log_softmax(logp)).sum()


def unnormalised_logp_loss(logp, logp_old, scores, eta):
    q = jax.nn.softmax(logp_old + jnp_u(scores) / eta)
    return -(q * logp).sum(-1).mean()


def numpy_loss(logp, logp_old, scores, eta):
    return float(-(np_target(logp_old, scores, eta) * np.log(np_softmax(logp))).sum(-1).mean())


def sample_std_adv(scores):
    c = scores - scores.mean(-1, keepdims=True)
    return c / (jnp.std(c, -1, ddof=1, keepdims=True) + 1e-8)


def no_eps_adv(scores):
    c = scores - scores.mean(-1, keepdims=True)
    return c / jnp.sqrt((c**2).mean(-1, keepdims=True))


def inverted_k3(logp, logp_ref):
    log_r = logp - logp_ref
    return jnp.exp(log_r) - 1 - log_r


def k1(logp, logp_ref):
    return logp - logp_ref


def mean_seq_logp(token_logp, mask):
    m = mask.astype(jnp.float32)
    return (token_logp * m).sum(-1) / jnp.maximum(m.sum(-1), 1.0)


def unmasked_seq_logp(token_logp, mask):
    return token_logp.sum(-1)


def inclusive_prefix_rewards(cand_correct, behaviour_correct, reward):
    c = cand_correct.astype(jnp.float32)
    if reward == "bag":
        return c
    return jnp.cumprod(behaviour_correct.astype(jnp.float32), -1)[..., None] * c


def bag_for_sequential(cand_correct, behaviour_correct, reward):
    return cand_correct.astype(jnp.float32)


def np_sequence_weights(logp, logp_old, scores, eta):
    """K (q - p) at the current logp: -N times the gradient of the mean group loss (N = G K sequences)."""
    K = np.shape(logp)[-1]
    return K * (np_target(logp_old, scores, eta) - np_softmax(logp))


def route_a_weights(logp, logp_old, scores, eta):
    """Route A's weights K (q - p_old): right at logp == logp_old only."""
    K = logp.shape[-1]
    return K * (jax.nn.softmax(logp_old + jnp_u(scores) / eta) - jax.nn.softmax(logp_old))


def no_k_weights(logp, logp_old, scores, eta):
    return jax.nn.softmax(logp_old + jnp_u(scores) / eta) - jax.nn.softmax(logp)


def negated_weights(logp, logp_old, scores, eta):
    return -np_sequence_weights(logp, logp_old, scores, eta)


def wrong_axis_weights(logp, logp_old, scores, eta):
    K = logp.shape[-1]
    return K * (jax.nn.softmax(logp_old + jnp_u(scores) / eta, axis=0) - jax.nn.softmax(logp, axis=0))


def q_from_p_weights(logp, logp_old, scores, eta):
    K = logp.shape[-1]
    return K * (jax.nn.softmax(logp + jnp_u(scores) / eta) - jax.nn.softmax(logp))


CASES = [
    (X.check_standardize, np_standardize, [sample_std_standardize, no_floor_standardize, batch_axis_standardize]),
    (X.check_tpo_target, np_target, [wrong_axis_target, no_anchor_target, times_eta_target, sample_std_target]),
    (X.check_tpo_loss_grad, jnp_tpo_loss, [no_stop_gradient_loss, summed_loss, unnormalised_logp_loss, numpy_loss]),
    (X.check_grpo_advantages, np_grpo_adv, [sample_std_adv, no_eps_adv, sample_std_standardize]),
    (X.check_k3, np_k3, [inverted_k3, k1]),
    (X.check_sequence_logprob, np_seq_logp, [mean_seq_logp, unmasked_seq_logp]),
    (X.check_candidate_rewards, np_candidate_rewards, [inclusive_prefix_rewards, bag_for_sequential]),
    (
        X.check_sequence_weights,
        np_sequence_weights,
        [route_a_weights, no_k_weights, negated_weights, wrong_axis_weights, q_from_p_weights],
    ),
]


@pytest.mark.parametrize("checker,correct", [(c, f) for c, f, _ in CASES], ids=lambda x: x.__name__)
def test_checker_passes_a_correct_function(checker, correct, capsys):
    checker(correct)
    out = capsys.readouterr().out
    assert out.startswith(f"passed: {checker.__name__}({correct.__name__})"), out


@pytest.mark.parametrize("checker,buggy", [(c, b) for c, _, bugs in CASES for b in bugs], ids=lambda x: x.__name__)
def test_checker_rejects_a_typical_bug(checker, buggy):
    with pytest.raises(AssertionError, match="differs from tpo_core|cannot differentiate"):
        checker(buggy)


def test_a_missing_stop_gradient_is_caught_by_the_gradient_not_the_value():
    # at logp == logp_old the buggy loss has the right value; only its gradient differs
    rng = np.random.default_rng(0)
    lo = jnp.asarray(rng.normal(size=(3, 5)), jnp.float32)
    s = jnp.asarray(rng.integers(0, 2, size=(3, 5)), jnp.float32)
    np.testing.assert_allclose(no_stop_gradient_loss(lo, lo, s, 1.0), jnp_tpo_loss(lo, lo, s, 1.0), rtol=1e-6)
    with pytest.raises(AssertionError, match=r"gradient.*\n(.*\n)*.*hint: .*not frozen"):
        X.check_tpo_loss_grad(no_stop_gradient_loss)


@pytest.mark.parametrize(
    "checker,buggy,hint",
    [
        (X.check_standardize, sample_std_standardize, "sample std"),
        (X.check_standardize, no_floor_standardize, "zero-variance rule"),
        (X.check_tpo_target, no_anchor_target, "anchor"),
        (X.check_tpo_target, times_eta_target, "multiplying by η"),
        (X.check_grpo_advantages, sample_std_adv, "sample std"),
        (X.check_k3, inverted_k3, "wrong way round"),
        (X.check_sequence_logprob, mean_seq_logp, "mean over tokens"),
        (X.check_candidate_rewards, inclusive_prefix_rewards, "includes state t"),
        (X.check_sequence_weights, route_a_weights, "Route A's first-step weights K(q - p_old) after the policy moved"),
        (X.check_sequence_weights, no_k_weights, "factor K"),
        (X.check_sequence_weights, negated_weights, "wrong sign"),
        (X.check_sequence_weights, wrong_axis_weights, "wrong axis"),
        (X.check_sequence_weights, q_from_p_weights, "q from the current p instead of p_old"),
    ],
)
def test_known_bugs_are_named(checker, buggy, hint):
    with pytest.raises(AssertionError) as info:
        checker(buggy)
    assert "hint:" in str(info.value) and hint in str(info.value), str(info.value)


def test_hints_can_be_hidden():
    with pytest.raises(AssertionError) as info:
        X.check_candidate_rewards(inclusive_prefix_rewards, show_hints=False)
    assert "differs from tpo_core" in str(info.value) and "hint:" not in str(info.value)
    with pytest.raises(AssertionError, match="hint:"):  # and come back on the next call
        X.check_candidate_rewards(inclusive_prefix_rewards)


def test_wrong_shape_is_reported():
    with pytest.raises(AssertionError, match="returned shape"):
        X.check_grpo_advantages(lambda s: s.mean(-1))


def test_attempt_prints_instead_of_raising(capsys):
    def stub(scores):
        raise NotImplementedError

    assert X.attempt(X.check_standardize, stub) is False
    assert "not solved yet: stub raises NotImplementedError" in capsys.readouterr().out
    assert X.attempt(X.check_standardize, sample_std_standardize) is False
    assert capsys.readouterr().out.startswith("not solved yet: sample_std_standardize(scores) differs")
    assert X.attempt(X.check_standardize, np_standardize) is True
    assert capsys.readouterr().out.startswith("passed:")


def test_other_errors_in_the_readers_code_propagate():
    def broken(scores):
        raise KeyError("oops")

    with pytest.raises(KeyError):
        X.attempt(X.check_standardize, broken)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: X.check_tpo_target("not a function"), "fn"),
        (lambda: X.attempt("nope", np_standardize), "checker"),
        (lambda: X.check_k3(np_k3, trials=0), "trials"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(call, name):
    with pytest.raises(ValueError, match=f"^{name} "):
        call()


# --------------------------------------------------------------------------------------------
# ch. 10: the sequence weights at the current policy
# --------------------------------------------------------------------------------------------
def test_route_a_weights_pass_at_the_rollout_and_fail_after_a_step():
    # at logp == logp_old, K (q - p_old) is right; the checker must reject it on the moved inputs
    rng = np.random.default_rng(1)
    lo = jnp.asarray(rng.normal(size=(3, 6)) - 5.0, jnp.float32)
    s = jnp.asarray(rng.integers(0, 2, size=(3, 6)), jnp.float32)
    np.testing.assert_allclose(route_a_weights(lo, lo, s, 1.0), np_sequence_weights(lo, lo, s, 1.0), atol=1e-5)
    with pytest.raises(AssertionError, match=r"after the policy moved.*differs(.*\n)*.*hint: .*Route A"):
        X.check_sequence_weights(route_a_weights)


def test_sequence_weights_match_the_bridge_at_the_rollout():
    # the sign convention: at θ = θ_old the weights are tpo_sequence_weights' K (q - p_old)
    torch = pytest.importorskip("torch")
    from tpo_core.bridge import torch_ops as T

    rng = np.random.default_rng(2)
    G, K = 3, 5
    lo = rng.normal(size=(G, K)) - 6.0
    s = rng.integers(0, 3, size=(G, K)).astype(float)
    w_bridge = (
        T.tpo_sequence_weights(torch.tensor(lo.ravel()), torch.tensor(s.ravel()), np.repeat(np.arange(G), K), eta=0.5)
        .numpy()
        .reshape(G, K)
    )
    np.testing.assert_allclose(np_sequence_weights(lo, lo, s, 0.5), w_bridge, atol=1e-10)


def test_sequence_weights_are_minus_n_times_the_loss_gradient():
    rng = np.random.default_rng(3)
    lo = rng.normal(size=(4, 6)) - 6.0
    lp = lo + rng.normal(size=(4, 6))
    s = rng.normal(size=(4, 6))
    g = np.asarray(
        jax.grad(jnp_tpo_loss)(
            jnp.asarray(lp, jnp.float32), jnp.asarray(lo, jnp.float32), jnp.asarray(s, jnp.float32), 2.0
        )
    )
    np.testing.assert_allclose(np_sequence_weights(lp, lo, s, 2.0), -4 * 6 * g, atol=1e-5)


# --------------------------------------------------------------------------------------------
# ch. 9: mini-batches of whole groups
# --------------------------------------------------------------------------------------------
def group_minibatches(n_prompts, K, n_minibatches, rng):
    """Shuffle the prompts, cut them into equal parts, and list each prompt's K rows together."""
    if n_prompts % n_minibatches:
        raise ValueError(f"{n_minibatches} mini-batches cannot split {n_prompts} prompts equally")
    per = n_prompts // n_minibatches
    prompts = list(rng.permutation(n_prompts))
    return [
        np.array([p * K + k for p in prompts[i * per : (i + 1) * per] for k in range(K)], dtype=np.int64)
        for i in range(n_minibatches)
    ]


def shuffled_rows(n_prompts, K, n_minibatches, rng):
    if n_prompts % n_minibatches:
        raise ValueError("uneven")
    return np.split(rng.permutation(n_prompts * K), n_minibatches)


def contiguous_array_split(n_prompts, K, n_minibatches, rng):
    order = rng.permutation(n_prompts)
    return np.array_split((order[:, None] * K + np.arange(K)).ravel(), n_minibatches)


def with_replacement(n_prompts, K, n_minibatches, rng):
    if n_prompts % n_minibatches:
        raise ValueError("uneven")
    order = rng.choice(n_prompts, n_prompts)
    return [(p[:, None] * K + np.arange(K)).ravel() for p in np.split(order, n_minibatches)]


def dropped_last_prompt(n_prompts, K, n_minibatches, rng):
    if n_prompts % n_minibatches:
        raise ValueError("uneven")
    order = rng.permutation(n_prompts)
    batches = [(p[:, None] * K + np.arange(K)).ravel() for p in np.split(order, n_minibatches)]
    batches[-1] = batches[-1][:-K] if batches[-1].size > K else batches[-1][:-1]
    return batches


def k_major(n_prompts, K, n_minibatches, rng):
    if n_prompts % n_minibatches:
        raise ValueError("uneven")
    order = rng.permutation(n_prompts)
    return [(p[:, None] + np.arange(K) * n_prompts).ravel() for p in np.split(order, n_minibatches)]


def unshuffled(n_prompts, K, n_minibatches, rng):
    if n_prompts % n_minibatches:
        raise ValueError("uneven")
    return np.split(np.arange(n_prompts * K), n_minibatches)


def global_rng(n_prompts, K, n_minibatches, rng):
    return group_minibatches(n_prompts, K, n_minibatches, np.random.default_rng(np.random.randint(2**31)))


def fixed_seed(n_prompts, K, n_minibatches, rng):
    return group_minibatches(n_prompts, K, n_minibatches, np.random.default_rng(0))


def interleaved_groups(n_prompts, K, n_minibatches, rng):
    batches = group_minibatches(n_prompts, K, n_minibatches, rng)
    return [b.reshape(-1, K).T.ravel() for b in batches]  # whole groups, but k-major inside the mini-batch


def test_group_minibatches_passes_a_correct_function(capsys):
    X.check_group_minibatches(group_minibatches)
    assert capsys.readouterr().out.startswith("passed: check_group_minibatches(group_minibatches)")


def test_group_minibatches_accepts_lists_and_other_seeds(capsys):
    as_lists = lambda *a: [b.tolist() for b in group_minibatches(*a)]  # noqa: E731
    X.check_group_minibatches(as_lists, trials=3, seed=11)
    assert capsys.readouterr().out.startswith("passed:")


@pytest.mark.parametrize(
    "buggy,message",
    [
        (shuffled_rows, r"does not hold whole groups(.*\n)*.*hint: .*shuffling rows"),
        (contiguous_array_split, r"instead of raising ValueError(.*\n)*.*hint: .*np.array_split"),
        (with_replacement, r"every row exactly once(.*\n)*.*hint: .*with replacement"),
        (dropped_last_prompt, r"every row exactly once(.*\n)*.*never appear(.*\n)*.*hint: .*missing rows"),
        (k_major, r"does not hold whole groups(.*\n)*.*hint: .*K-major"),
        (unshuffled, r"never shuffles the prompts"),
        (global_rng, r"two generators with the same seed"),
        (fixed_seed, r"three generators with different seeds"),
        (interleaved_groups, r"not next to each other"),
    ],
    ids=lambda x: getattr(x, "__name__", "msg"),
)
def test_group_minibatches_names_the_bug(buggy, message, capsys):
    with pytest.raises(AssertionError, match=message):
        X.check_group_minibatches(buggy)
    assert X.attempt(X.check_group_minibatches, buggy) is False
    assert capsys.readouterr().out.startswith("not solved yet: ")


def test_group_minibatches_hints_can_be_hidden():
    with pytest.raises(AssertionError) as info:
        X.check_group_minibatches(shuffled_rows, show_hints=False)
    assert "does not hold whole groups" in str(info.value) and "hint:" not in str(info.value)


def test_group_minibatches_reports_what_is_not_a_list_of_index_arrays():
    with pytest.raises(AssertionError, match="expected a list of index arrays"):
        X.check_group_minibatches(lambda n, K, M, rng: None)
    with pytest.raises(AssertionError, match="integer row indices"):
        X.check_group_minibatches(lambda *a: [b.astype(float) for b in group_minibatches(*a)])
    with pytest.raises(AssertionError, match="expected n_minibatches = 3"):
        X.check_group_minibatches(lambda n, K, M, rng: group_minibatches(n, K, 1, rng))


def test_attempt_returns_false_for_the_weight_bugs(capsys):
    assert X.attempt(X.check_sequence_weights, route_a_weights) is False
    out = capsys.readouterr().out
    assert out.startswith("not solved yet: route_a_weights(logp, logp_old, scores") and "Route A" in out
    assert X.attempt(X.check_sequence_weights, np_sequence_weights) is True
