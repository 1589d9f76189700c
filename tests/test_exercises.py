"""The exercise checkers accept a correct function written here from the formulas and reject typical bugs."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tpo_core import exercises as X


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
    q = jax.nn.softmax(logp_old + jnp_u(scores) / eta)          # no gradient: depends on logp_old only
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
            out[i, t] = c[i, t] * float(b[i, :t].all())          # every behaviour token before t right
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
    c = scores - scores.mean(0, keepdims=True)                   # mean over the wrong axis
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
    q = jax.nn.softmax(logp + jnp_u(scores) / eta)               # q follows the current policy: not frozen
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


CASES = [
    (X.check_standardize, np_standardize, [sample_std_standardize, no_floor_standardize, batch_axis_standardize]),
    (X.check_tpo_target, np_target, [wrong_axis_target, no_anchor_target, times_eta_target, sample_std_target]),
    (X.check_tpo_loss_grad, jnp_tpo_loss, [no_stop_gradient_loss, summed_loss, unnormalised_logp_loss, numpy_loss]),
    (X.check_grpo_advantages, np_grpo_adv, [sample_std_adv, no_eps_adv, sample_std_standardize]),
    (X.check_k3, np_k3, [inverted_k3, k1]),
    (X.check_sequence_logprob, np_seq_logp, [mean_seq_logp, unmasked_seq_logp]),
    (X.check_candidate_rewards, np_candidate_rewards, [inclusive_prefix_rewards, bag_for_sequential]),
]


@pytest.mark.parametrize("checker,correct", [(c, f) for c, f, _ in CASES], ids=lambda x: x.__name__)
def test_checker_passes_a_correct_function(checker, correct, capsys):
    checker(correct)
    out = capsys.readouterr().out
    assert out.startswith(f"passed: {checker.__name__}({correct.__name__})"), out


@pytest.mark.parametrize("checker,buggy", [(c, b) for c, _, bugs in CASES for b in bugs],
                         ids=lambda x: x.__name__)
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


@pytest.mark.parametrize("checker,buggy,hint", [
    (X.check_standardize, sample_std_standardize, "sample std"),
    (X.check_standardize, no_floor_standardize, "zero-variance rule"),
    (X.check_tpo_target, no_anchor_target, "anchor"),
    (X.check_tpo_target, times_eta_target, "multiplying by η"),
    (X.check_grpo_advantages, sample_std_adv, "sample std"),
    (X.check_k3, inverted_k3, "wrong way round"),
    (X.check_sequence_logprob, mean_seq_logp, "mean over tokens"),
    (X.check_candidate_rewards, inclusive_prefix_rewards, "includes state t"),
])
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


@pytest.mark.parametrize("call,name", [
    (lambda: X.check_tpo_target("not a function"), "fn"),
    (lambda: X.attempt("nope", np_standardize), "checker"),
    (lambda: X.check_k3(np_k3, trials=0), "trials"),
])
def test_bad_arguments_raise_value_error_naming_them(call, name):
    with pytest.raises(ValueError, match=f"^{name} "):
        call()
