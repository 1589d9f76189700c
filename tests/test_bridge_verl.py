"""tpo_core.bridge.verl: the plugin through verl's entry point, both routes' gradients, and the issue-28 fixes.

The sequence score ℓ_i is ``"sum"`` (Σ_t log π, the paper's) or ``"mean"`` (that over the length n_i, the
default). dL/d log_prob[i, t] = dL/dℓ_i · ∂ℓ_i/∂log_prob[i, t] = dL/dℓ_i (sum) or dL/dℓ_i / n_i (mean) on
every response token of row i: the checks recover dL/dℓ_i per sequence from the token gradients (asserting
every valid token carries the same value and padding 0) and compare it with (p_i - q_i)/G.

Expected values never come from the code under test: q from ``tpo_core.losses.tpo_target`` (the JAX engine)
or from the closed forms written here in numpy float64; verl's k3 written out by hand.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the bridge needs PyTorch: pip install 'tpo_core[torch]'")
verl = pytest.importorskip("verl", reason="verl tests need verl: pip install 'tpo_core[verl]'")

import jax.numpy as jnp  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402

from tpo_core import losses as L  # noqa: E402
from tpo_core.bridge import torch_ops as T  # noqa: E402
from tpo_core.bridge import verl as V  # noqa: E402

G, K, T_LEN = 3, 4, 6
SCORES = ("sum", "mean")


def _rollout(seed=0, groups=G, k=K, t=T_LEN):
    """A verl-like batch: token log-probs [N, T], a right-padded response mask, outcome reward on the last token."""
    rng = np.random.default_rng(seed)
    n = groups * k
    lengths = rng.integers(2, t + 1, n)
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.float32)
    old = -rng.uniform(0.1, 2.0, (n, t)).astype(np.float32) * mask
    scores = rng.integers(0, 2, n).astype(np.float32)
    scores[:k] = 1.0  # one all-equal group
    rewards = np.zeros((n, t), np.float32)
    rewards[np.arange(n), lengths - 1] = scores
    uid = np.repeat(np.array([f"p{i}" for i in range(groups)], dtype=object), k)
    return dict(
        old=torch.tensor(old),
        mask=torch.tensor(mask),
        rewards=torch.tensor(rewards),
        scores=scores,
        uid=uid,
        lengths=lengths,
    )


def _per_token(grad, mask):
    """The one gradient value every valid token of a row carries (asserting that they agree, and pads are 0)."""
    m = mask.bool()
    assert torch.all(grad[~m] == 0)
    first = grad[torch.arange(grad.shape[0]), 0]
    torch.testing.assert_close(grad * mask, first[:, None] * mask, rtol=1e-6, atol=1e-9)
    return first.double().numpy()


def _per_sequence(grad, mask, score):
    """dL/dℓ_i from the token gradients: ∂ℓ_i/∂log π_it is 1 (sum) or 1/n_i (mean)."""
    g = _per_token(grad, mask)
    return g * mask.sum(-1).double().numpy() if score == "mean" else g


def _np_seq(tok, mask, score):
    tok, mask = np.asarray(tok, np.float64), np.asarray(mask, np.float64)
    s = (tok * mask).sum(-1)
    return s / np.maximum(mask.sum(-1), 1.0) if score == "mean" else s


def _np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_u(s):
    """The paper's z-score: population std, u = c if σ <= 1e-6."""
    c = s - s.mean()
    sd = np.sqrt((c * c).mean())
    return c / sd if sd > 1e-6 else c


def _np_target(seq_old, s, eta=1.0):
    w = _np_softmax(seq_old) * np.exp(_np_u(s) / eta)
    return w / w.sum()


def _expected_seq_grad(seq_logp, seq_logp_old, scores, eta, groups):
    """(p - q)/G per sequence, q from the JAX engine; rows grouped contiguously [G, K]."""
    q = np.asarray(
        L.tpo_target(
            jnp.asarray(seq_logp_old.reshape(groups, -1), jnp.float32), jnp.asarray(scores.reshape(groups, -1)), eta
        ),
        np.float64,
    )
    p = _np_softmax(seq_logp.reshape(groups, -1).astype(np.float64))
    return ((p - q) / groups).reshape(-1)


class _ActorCfg(dict):
    """The fields verl's losses read from an ActorConfig (policy_loss carries TPO's sequence score)."""

    def __init__(self, rollout_n, score=None, **info):
        policy_loss = (
            {"loss_mode": "tpo_group"} if score is None else {"loss_mode": "tpo_group", "tpo_sequence_logp": score}
        )
        super().__init__(rollout_n=rollout_n, global_batch_info=dict(info), policy_loss=policy_loss)
        self.rollout_n, self.global_batch_info, self.policy_loss = rollout_n, dict(info), policy_loss


def _compose(*overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.dirname(V.__file__), version_base=None):
        return compose(config_name="verl_gsm8k", overrides=list(overrides))


def _actor(*overrides):
    from verl.utils.config import omega_conf_to_dataclass

    return omega_conf_to_dataclass(_compose(*overrides).actor_rollout_ref.actor)


def _cosine(a, b):
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# --------------------------------------------------------------------------------------------
# the plugin
# --------------------------------------------------------------------------------------------
def test_plugin_loads_through_the_entry_point_and_both_names_resolve():
    code = (
        "import sys, importlib.metadata as md\n"
        "eps = [e for e in md.entry_points(group='verl.plugins') if e.value == 'tpo_core.bridge.verl']\n"
        "assert eps, 'entry point verl.plugins -> tpo_core.bridge.verl not installed (pip install -e .)'\n"
        "assert 'tpo_core.bridge.verl' not in sys.modules\n"
        "import verl\n"
        "from verl.trainer.ppo import core_algos as c\n"
        "assert 'tpo_core.bridge.verl' in sys.modules, 'import verl did not load the plugin'\n"
        "m = sys.modules['tpo_core.bridge.verl']\n"
        "assert c.get_adv_estimator_fn('tpo') is m.compute_tpo_advantage\n"
        "assert c.get_adv_estimator_fn('tpo_group') is m.compute_tpo_group_advantage\n"
        "assert c.get_policy_loss_fn('tpo_group') is m.compute_policy_loss_tpo_group\n"
        "print('ok')\n"
    )
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "auto"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]
    # with discovery off, nothing registers: the entry point (not a test import) is what loads it
    off = (
        "import verl\nfrom verl.trainer.ppo import core_algos as c\n"
        "assert 'tpo' not in c.ADV_ESTIMATOR_REGISTRY and 'tpo_group' not in c.POLICY_LOSS_REGISTRY\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", off],
        env={**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]


# --------------------------------------------------------------------------------------------
# both routes, either sequence score
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("score", SCORES)
def test_route_a_gpg_gradient_at_theta_old_is_p_minus_q_over_g(score):
    r = _rollout()
    eta = 0.5
    adv, ret = core_algos.get_adv_estimator_fn("tpo")(
        token_level_rewards=r["rewards"],
        response_mask=r["mask"],
        index=r["uid"],
        config=OmegaConf.create({"tpo_eta": eta, "tpo_sequence_logp": score}),
        old_log_probs=r["old"],
    )
    assert torch.equal(adv, ret)
    log_prob = r["old"].clone().requires_grad_(True)  # θ = θ_old
    loss, _ = core_algos.get_policy_loss_fn("gpg")(
        old_log_prob=r["old"],
        log_prob=log_prob,
        advantages=adv,
        response_mask=r["mask"].bool(),
        loss_agg_mode="seq-mean-token-sum",
        config=_ActorCfg(K, dp_size=1, global_batch_size=G * K),
    )
    loss.backward()
    got = _per_sequence(log_prob.grad, r["mask"], score)
    seq_old = _np_seq(r["old"], r["mask"], score)
    np.testing.assert_allclose(got, _expected_seq_grad(seq_old, seq_old, r["scores"], eta, G), atol=2e-7)
    if score == "mean":  # the default is the mean
        default, _ = V.compute_tpo_advantage(
            r["rewards"], r["mask"], index=r["uid"], old_log_probs=r["old"], config={"tpo_eta": eta}
        )
        torch.testing.assert_close(default, adv, rtol=0, atol=0)


def test_route_a_bad_inputs_name_the_parameter():
    r = _rollout()
    with pytest.raises(ValueError, match="old_log_probs"):
        V.compute_tpo_advantage(r["rewards"], r["mask"], index=r["uid"])
    with pytest.raises(ValueError, match="algorithm.tpo_sequence_logp"):
        V.compute_tpo_advantage(
            r["rewards"], r["mask"], index=r["uid"], old_log_probs=r["old"], config={"tpo_sequence_logp": "median"}
        )
    with pytest.raises(ValueError, match="tpo_seq_reduce"):  # the old key is never ignored
        V.compute_tpo_advantage(
            r["rewards"], r["mask"], index=r["uid"], old_log_probs=r["old"], config={"tpo_seq_reduce": "sum"}
        )
    with pytest.raises(ValueError, match="tpo_seq_reduce"):
        V.compute_tpo_group_advantage(r["rewards"], r["mask"], index=r["uid"], config={"tpo_seq_reduce": "sum"})
    with pytest.raises(ValueError, match="actor.policy_loss.tpo_sequence_logp"):
        V.compute_policy_loss_tpo_group(
            r["old"], r["old"], torch.zeros_like(r["old"]), r["mask"].bool(), config=_ActorCfg(K, "Sum")
        )
    with pytest.raises(ValueError, match="actor.policy_loss.tpo_sequence_logp"):
        V.TPOPolicyLossConfig(loss_mode="tpo_group", tpo_sequence_logp="token")


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("theta_moved", [False, True])
def test_route_b_gradient_is_p_minus_q_over_g_at_any_theta(theta_moved, score):
    r = _rollout(seed=3)
    eta = 2.0
    adv, _ = core_algos.get_adv_estimator_fn("tpo_group")(
        token_level_rewards=r["rewards"],
        response_mask=r["mask"],
        index=r["uid"],
        config=OmegaConf.create({"tpo_eta": eta}),
    )
    shift = torch.tensor(np.random.default_rng(9).normal(0, 0.3, r["old"].shape), dtype=torch.float32)
    current = r["old"] + (shift * r["mask"] if theta_moved else 0.0)  # a later epoch: θ ≠ θ_old
    log_prob = current.clone().requires_grad_(True)
    loss, metrics = core_algos.get_policy_loss_fn("tpo_group")(
        old_log_prob=r["old"],
        log_prob=log_prob,
        advantages=adv,
        response_mask=r["mask"].bool(),
        loss_agg_mode="token-mean",
        config=_ActorCfg(K, score, dp_size=1, global_batch_size=G * K),
    )
    loss.backward()
    assert loss.dtype == torch.float32 and log_prob.grad.dtype == torch.float32
    got = _per_sequence(log_prob.grad, r["mask"], score)
    seq_old = _np_seq(r["old"], r["mask"], score)
    seq_now = _np_seq(current, r["mask"], score)
    np.testing.assert_allclose(got, _expected_seq_grad(seq_now, seq_old, r["scores"], eta, G), atol=2e-7)
    # the loss value is the engine's mean group cross-entropy
    ref = float(
        L.tpo_loss(
            jnp.asarray(seq_now.reshape(G, K), jnp.float32),
            jnp.asarray(seq_old.reshape(G, K), jnp.float32),
            jnp.asarray(r["scores"].reshape(G, K)),
            eta,
        )
    )
    assert loss.item() == pytest.approx(ref, rel=1e-5, abs=1e-6)
    assert {"actor/tpo_tv", "actor/tpo_tv_old", "actor/tpo_entropy_q", "actor/tpo_entropy_p"} <= set(metrics)


@pytest.mark.parametrize("flag", [None, "sum", "mean"])
def test_sequence_score_from_the_verl_config_reaches_the_loss(flag):
    """algorithm.tpo_sequence_logp → actor.policy_loss (a real ActorConfig) → the loss; closed form by hand."""
    k = 4
    actor = _actor(f"actor_rollout_ref.rollout.n={k}", *([f"algorithm.tpo_sequence_logp={flag}"] if flag else []))
    score = flag or "mean"
    assert isinstance(actor.policy_loss, V.TPOPolicyLossConfig) and actor.policy_loss.tpo_sequence_logp == score
    r = _rollout(seed=7, groups=2, k=k)
    assert len(set(r["lengths"].tolist())) > 2  # unequal lengths: sum ≠ mean
    adv, _ = V.compute_tpo_group_advantage(r["rewards"], r["mask"], index=r["uid"])
    shift = torch.tensor(np.random.default_rng(1).normal(0, 0.4, r["old"].shape), dtype=torch.float32)
    current = (r["old"] + shift * r["mask"]).requires_grad_(True)
    actor.global_batch_info.update(dp_size=1, global_batch_size=2 * k)
    loss, _ = core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)(
        r["old"], current, adv, r["mask"].bool(), actor.loss_agg_mode, actor
    )
    loss.backward()

    def closed_form(s):  # L = (1/G) Σ_g -Σ_i q_i log p_i; dL/dlog π_it = (p_i - q_i)/G · ∂ℓ_i
        lo, ln = _np_seq(r["old"], r["mask"], s).reshape(2, k), _np_seq(current.detach(), r["mask"], s).reshape(2, k)
        q = np.stack([_np_target(lo[g], r["scores"].reshape(2, k)[g]) for g in range(2)])
        logp = ln - ln.max(-1, keepdims=True) - np.log(np.exp(ln - ln.max(-1, keepdims=True)).sum(-1, keepdims=True))
        value = float(-(q * logp).sum() / 2)
        d_seq = ((np.exp(logp) - q) / 2).reshape(-1)
        d_tok = d_seq / r["lengths"] if s == "mean" else d_seq
        return value, d_tok

    value, d_tok = closed_form(score)
    other, _ = closed_form("sum" if score == "mean" else "mean")
    assert abs(value - other) > 0.05  # the two scores are told apart
    assert loss.item() == pytest.approx(value, rel=1e-6)
    np.testing.assert_allclose(_per_token(current.grad, r["mask"]), d_tok, rtol=1e-5, atol=1e-8)
    # verl's own PolicyLossConfig has no such field: the loss then uses the default, "mean"
    from verl.workers.config import PolicyLossConfig

    assert V.loss_sequence_score({"policy_loss": PolicyLossConfig(loss_mode="tpo_group")}) == "mean"


# --------------------------------------------------------------------------------------------
# issue 28: all-masked rows, float64, KL
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("score", SCORES)
def test_an_all_masked_row_is_left_out_of_the_group(score):
    r = _rollout(seed=11, groups=2)
    n, dead = 2 * K, 1
    mask = r["mask"].clone()
    mask[dead] = 0.0  # e.g. verl's sequence-level RS
    old = r["old"] * mask
    scores = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0], np.float32)  # the dead row "succeeded"
    rewards = torch.zeros_like(mask)
    rewards[torch.arange(n), torch.tensor(r["lengths"] - 1)] = torch.tensor(scores)
    live = [i for i in range(K) if i != dead]
    eta = 1.0

    def reference(s):  # each group without the dead row, computed here: q and p_old over the valid rows
        lo = _np_seq(old, mask, s)
        q = np.zeros(n)
        p_old = np.zeros(n)
        q[live] = _np_target(lo[live], scores[live], eta)
        p_old[live] = _np_softmax(lo[live])
        q[K:] = _np_target(lo[K:], scores[K:], eta)
        p_old[K:] = _np_softmax(lo[K:])
        return q, p_old

    q_ref, p_old_ref = reference(score)
    # without `valid` its ℓ = 0 is the group's largest score: it would take most of p_old and of q
    seq_old = T.sequence_logp(old, mask, score).view(2, K)
    assert int(seq_old[0].argmax()) == dead
    assert float(T.tpo_target(seq_old, torch.tensor(scores).view(2, K), eta)[0, dead]) > 0.5

    # Route B: the estimator's u and the loss's q, gradient and metrics
    adv, _ = V.compute_tpo_group_advantage(rewards, mask, index=r["uid"], config={"tpo_eta": eta})
    assert torch.all(adv[dead] == 0)
    a = (adv * mask).sum(-1) / mask.sum(-1).clamp_min(1)
    q = V.group_target(seq_old, a.view(2, K), mask.bool().any(-1).view(2, K)).reshape(-1).numpy()
    assert q[dead] == 0.0
    np.testing.assert_allclose(q, q_ref, rtol=1e-6, atol=1e-9)
    shift = torch.tensor(np.random.default_rng(4).normal(0, 0.3, old.shape), dtype=torch.float32) * mask
    current = (old + shift).requires_grad_(True)
    loss, metrics = V.compute_policy_loss_tpo_group(
        old, current, adv, mask.bool(), config=_ActorCfg(K, score, dp_size=1, global_batch_size=n)
    )
    loss.backward()
    assert torch.all(current.grad[dead] == 0)
    lo_now = _np_seq(current.detach(), mask, score)
    p_now = np.zeros(n)
    p_now[live], p_now[K:] = _np_softmax(lo_now[live]), _np_softmax(lo_now[K:])
    rows = [i for i in range(n) if i != dead]
    got = _per_sequence(current.grad[rows], mask[rows], score)
    np.testing.assert_allclose(got, ((p_now - q_ref) / 2)[rows], rtol=1e-5, atol=1e-8)
    tv_old = 0.5 * np.abs(q_ref - p_old_ref).reshape(2, K).sum(-1).mean()
    assert metrics["actor/tpo_tv_old"] == pytest.approx(tv_old, rel=1e-6)
    assert metrics["actor/tpo_valid_frac"] == pytest.approx((n - 1) / n)

    # Route A: the dead row's weight is 0; the others' gradient is the 3-row group's (global_batch_size = N rows)
    adv_a, _ = V.compute_tpo_advantage(
        rewards, mask, index=r["uid"], old_log_probs=old, config={"tpo_eta": eta, "tpo_sequence_logp": score}
    )
    assert torch.all(adv_a[dead] == 0)
    x = old.clone().requires_grad_(True)
    core_algos.get_policy_loss_fn("gpg")(
        old, x, adv_a, mask.bool(), "seq-mean-token-sum", _ActorCfg(K, dp_size=1, global_batch_size=n)
    )[0].backward()
    got = _per_sequence(x.grad[rows], mask[rows], score)
    np.testing.assert_allclose(got, ((p_old_ref - q_ref) / 2)[rows], rtol=1e-5, atol=1e-8)


def _tv_1e9_group(score, k=16):
    """One group: the most likely completion fails; the one success sits 25 nats below it; the rest 20-30 below."""
    rng = np.random.default_rng(5)
    seq = -5.0 - rng.uniform(20.0, 30.0, k)
    seq[0], seq[5] = -5.0, -30.0
    scores = np.zeros(k, np.float32)
    scores[5] = 1.0
    lengths = rng.integers(3, 9, k)
    t = int(lengths.max())
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.float32)
    per_tok = seq / lengths if score == "sum" else seq  # ℓ_i as designed, up to f32 rounding
    tok = (per_tok[:, None] * mask).astype(np.float32)
    rewards = np.zeros((k, t), np.float32)
    rewards[np.arange(k), lengths - 1] = scores
    # the reference: the f32 inputs read in float64; p - q without cancellation:
    # p_i - q_i = p_i Σ_j p_j (e^{u_j} - e^{u_i}) / Σ_j p_j e^{u_j}
    ell = _np_seq(tok, mask, score)
    p = _np_softmax(ell)
    eu = np.exp(_np_u(scores.astype(np.float64)))
    d = p * (p[None, :] * (eu[None, :] - eu[:, None])).sum(-1) / (p * eu).sum()
    return dict(
        tok=torch.tensor(tok),
        mask=torch.tensor(mask),
        rewards=torch.tensor(rewards),
        scores=scores,
        uid=np.zeros(k, dtype=np.int64),
        d=d,
        tv=0.5 * np.abs(d).sum(),
        lengths=lengths,
    )


@pytest.mark.parametrize("score", SCORES)
def test_float64_group_maths_keeps_the_direction_where_tv_is_1e_9(score):
    k = 16
    c = _tv_1e9_group(score, k)
    assert 1e-10 < c["tv"] < 1e-8  # TV(q, p_old) ≈ 1e-9
    # Route B, float32 token log-probs at θ = θ_old: dL/dℓ = (p - q)/G, G = 1
    x = c["tok"].clone().requires_grad_(True)
    adv, _ = V.compute_tpo_group_advantage(c["rewards"], c["mask"], index=c["uid"])
    loss, metrics = V.compute_policy_loss_tpo_group(
        c["tok"], x, adv, c["mask"].bool(), config=_ActorCfg(k, score, dp_size=1, global_batch_size=k)
    )
    loss.backward()
    assert loss.dtype == torch.float32 and x.grad.dtype == torch.float32
    got = _per_sequence(x.grad, c["mask"], score)
    assert _cosine(got, c["d"]) > 0.999
    assert metrics["actor/tpo_tv_old"] == pytest.approx(c["tv"], rel=1e-3)
    # Route A's weights K (q - p_old): the direction of -(p - q)
    adv_a, _ = V.compute_tpo_advantage(
        c["rewards"], c["mask"], index=c["uid"], old_log_probs=c["tok"], config={"tpo_sequence_logp": score}
    )
    w = (adv_a[:, 0] * (torch.tensor(c["lengths"]) if score == "mean" else 1)).double().numpy()
    assert _cosine(w, -c["d"]) > 0.999
    # the contrast: the same group maths in plain float32 (what the bridge did before) loses the direction
    seq32 = T.sequence_logp(c["tok"], c["mask"], score).view(1, k)
    s32 = torch.tensor(c["scores"]).view(1, k)
    y = seq32.clone().requires_grad_(True)
    T.tpo_loss(y, seq32, s32).backward()
    assert _cosine(y.grad.double().numpy().reshape(-1), c["d"]) < 0.9
    w32 = T.tpo_sequence_weights(seq32.view(-1), s32.view(-1), c["uid"]).double().numpy()
    assert _cosine(w32, -c["d"]) < 0.9


def _verl_batch(r, current, ref):
    """The TensorDict verl's ppo_loss reads (left-padded prompts, right-padded responses) and the model output."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    n, t = r["mask"].shape
    p_len = np.random.default_rng(0).integers(1, 4, n)
    prompt = 3
    attention = torch.zeros(n, prompt + t, dtype=torch.long)
    segments = []
    for i in range(n):
        attention[i, prompt - p_len[i] : prompt] = 1
        attention[i, prompt : prompt + r["lengths"][i]] = 1
        # the model's output for row i: one log-prob per position of prompt+response; response token j is
        # predicted at position p_len - 1 + j (verl's no_padding_2_padding left-shifts by one)
        index = torch.arange(r["lengths"][i]) + int(p_len[i]) - 1
        segments.append(torch.zeros(p_len[i] + r["lengths"][i]).index_put((index,), current[i, : r["lengths"][i]]))
    data = TensorDict(
        {
            "prompts": torch.ones(n, prompt, dtype=torch.long),
            "responses": torch.ones(n, t, dtype=torch.long),
            "attention_mask": attention,
            "response_mask": r["mask"].long(),
            "old_log_probs": r["old"],
            "advantages": r["adv"],
            "ref_log_prob": ref,
        },
        batch_size=[n],
    )
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(r["mask"].sum()), global_batch_size=n)
    return {"log_probs": torch.cat(segments)}, data


def test_verl_kl_loss_applies_with_the_tpo_loss_mode():
    """verl's ppo_loss adds kl_loss_coef · token-mean k3(π_θ, π_ref) to loss_mode=tpo_group's loss."""
    from verl.workers.utils.losses import ppo_loss

    k = 4
    r = _rollout(seed=8, groups=2, k=k)
    r["adv"], _ = V.compute_tpo_group_advantage(r["rewards"], r["mask"], index=r["uid"])
    rng = np.random.default_rng(3)
    now = r["old"] + torch.tensor(rng.normal(0, 0.2, r["old"].shape), dtype=torch.float32) * r["mask"]
    ref = (r["old"] + torch.tensor(rng.normal(0, 0.3, r["old"].shape), dtype=torch.float32)) * r["mask"]
    results = {}
    for use_kl in (True, False):
        actor = _actor(f"actor_rollout_ref.rollout.n={k}", f"actor_rollout_ref.actor.use_kl_loss={use_kl}")
        assert actor.policy_loss.loss_mode == "tpo_group" and actor.loss_agg_mode == "token-mean"
        current = now.clone().requires_grad_(True)
        output, data = _verl_batch(r, current, ref)
        loss, metrics = ppo_loss(actor, output, data)
        loss.backward()
        results[use_kl] = (loss.item(), current.grad.double().numpy(), metrics, actor)
    actor = results[True][3]
    assert actor.use_kl_loss and actor.kl_loss_type == "low_var_kl" and actor.kl_loss_coef == pytest.approx(1e-3)
    assert "kl_loss" in results[True][2] and "kl_loss" not in results[False][2]
    # k3 by hand: r = π_ref/π_θ per token, k3 = r - log r - 1; token-mean over the batch's response tokens
    m = r["mask"].double().numpy()
    log_r = (ref.double() - now.double()).numpy()
    k3 = np.exp(log_r) - log_r - 1.0
    n_tok = m.sum()
    assert results[True][0] - results[False][0] == pytest.approx(1e-3 * (k3 * m).sum() / n_tok, abs=3e-7)  # f32 losses
    d_k3 = 1e-3 * (1.0 - np.exp(log_r)) * m / n_tok  # ∂k3/∂log π_θ = 1 - r
    np.testing.assert_allclose(results[True][1] - results[False][1], d_k3, rtol=1e-4, atol=2e-9)  # f32 grads
    # and without the KL, ppo_loss's loss is the TPO loss itself
    ours, _ = V.compute_policy_loss_tpo_group(
        r["old"], now, r["adv"], r["mask"].bool(), config=_ActorCfg(k, dp_size=1, global_batch_size=2 * k)
    )
    assert results[False][0] == pytest.approx(ours.item(), rel=1e-6)


# --------------------------------------------------------------------------------------------
# data parallelism, guards, the passthrough, the GSM8K config
# --------------------------------------------------------------------------------------------
def test_route_b_two_ranks_average_to_the_full_batch_gradient():
    r = _rollout(seed=5, groups=4)
    adv, _ = V.compute_tpo_group_advantage(r["rewards"], r["mask"], index=r["uid"])
    n = 4 * K
    full = r["old"].clone().requires_grad_(True)
    V.compute_policy_loss_tpo_group(
        r["old"], full, adv, r["mask"].bool(), config=_ActorCfg(K, dp_size=1, global_batch_size=n)
    )[0].backward()
    grads = []
    for rank in (0, 1):  # each rank holds 2 whole groups
        rows = slice(rank * n // 2, (rank + 1) * n // 2)
        x = r["old"][rows].clone().requires_grad_(True)
        V.compute_policy_loss_tpo_group(
            r["old"][rows], x, adv[rows], r["mask"][rows].bool(), config=_ActorCfg(K, dp_size=2, global_batch_size=n)
        )[0].backward()
        grads.append(x.grad)
    dp_mean = torch.cat(grads) / 2  # DDP/FSDP average over ranks
    torch.testing.assert_close(dp_mean, full.grad, rtol=0, atol=1e-7)


def test_route_b_guard_raises_on_a_row_shuffled_micro_batch():
    r = _rollout(seed=1, groups=4)
    r["rewards"][:, :] = 0.0
    lengths = r["mask"].sum(-1).long()
    scores = np.tile([1.0, 0.0, 0.0, 0.0], 4)  # every group informative
    r["rewards"][torch.arange(4 * K), lengths - 1] = torch.tensor(scores, dtype=torch.float32)
    adv, _ = V.compute_tpo_group_advantage(r["rewards"], r["mask"], index=r["uid"])
    perm = torch.tensor(np.random.default_rng(0).permutation(4 * K))
    while all(len(set((perm[i * K : (i + 1) * K] // K).tolist())) == 1 for i in range(4)):
        perm = perm[torch.randperm(4 * K)]
    args = (r["old"][perm], r["old"][perm].clone().requires_grad_(True), adv[perm], r["mask"][perm].bool())
    with pytest.raises(ValueError, match="not whole groups"):
        V.compute_policy_loss_tpo_group(*args, config=_ActorCfg(K))
    # a micro-batch that is not a multiple of rollout_n, and a missing rollout_n
    with pytest.raises(ValueError, match="rollout_n"):
        V.compute_policy_loss_tpo_group(r["old"][:6], r["old"][:6], adv[:6], r["mask"][:6].bool(), config=_ActorCfg(K))
    with pytest.raises(ValueError, match="rollout_n"):
        V.compute_policy_loss_tpo_group(r["old"], r["old"], adv, r["mask"].bool(), config=_ActorCfg(0))


def test_old_log_prob_passthrough_feeds_verl_compute_advantage():
    from verl import DataProto
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.v1 import utils as v1_utils  # the default trainer (use_v1=true)

    assert getattr(ray_trainer.compute_advantage, "_tpo_passthrough", False), "plugin did not patch ray_trainer"
    assert v1_utils.compute_advantage is ray_trainer.compute_advantage  # v1 binds the patched function
    r = _rollout(seed=2)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": r["rewards"], "response_mask": r["mask"], "old_log_probs": r["old"]},
        non_tensors={"uid": r["uid"]},
    )
    for score in SCORES:
        cfg = OmegaConf.create({"tpo_eta": 1.0, "tpo_sequence_logp": score})
        out = ray_trainer.compute_advantage(data, adv_estimator="tpo", num_repeat=K, config=cfg)
        expect, _ = V.compute_tpo_advantage(r["rewards"], r["mask"], index=r["uid"], old_log_probs=r["old"], config=cfg)
        torch.testing.assert_close(out.batch["advantages"], expect)
    # another estimator goes to verl unchanged
    out = ray_trainer.compute_advantage(data, adv_estimator="grpo", num_repeat=K)
    assert out.batch["advantages"].shape == r["mask"].shape


def test_gsm8k_config_composes_and_carries_the_papers_lora_and_kl():
    from verl.utils.config import omega_conf_to_dataclass

    cfg = _compose()
    assert cfg.algorithm.adv_estimator == "tpo_group" and cfg.algorithm.tpo_eta == 1.0
    assert cfg.algorithm.tpo_sequence_logp == "mean"
    assert cfg.trainer.balance_batch is False
    # the paper's GSM8K runs (App. G): LoRA rank 32, KL 1e-3 (here verl's k3 KL loss to the base model)
    assert cfg.actor_rollout_ref.model.lora_rank == 32
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert actor.use_kl_loss and actor.kl_loss_coef == pytest.approx(1e-3) and actor.kl_loss_type == "low_var_kl"
    assert not cfg.algorithm.use_kl_in_reward
    k = actor.rollout_n
    assert k == cfg.actor_rollout_ref.rollout.n == 16
    assert actor.policy_loss.loss_mode == "tpo_group" and not actor.shuffle and not actor.use_dynamic_bsz
    assert actor.policy_loss.tpo_sequence_logp == "mean"
    assert actor.ppo_micro_batch_size_per_gpu % k == 0
    # the real ActorConfig drives the loss
    r = _rollout(seed=4, groups=1, k=k)
    adv, _ = V.compute_tpo_group_advantage(r["rewards"], r["mask"], index=r["uid"], config=cfg.algorithm)
    actor.global_batch_info.update(dp_size=1, global_batch_size=k)
    loss, _ = core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)(
        r["old"], r["old"], adv, r["mask"].bool(), actor.loss_agg_mode, actor
    )
    assert torch.isfinite(loss)
    # a bad score is refused when verl builds the actor config
    with pytest.raises(Exception, match="tpo_sequence_logp"):
        omega_conf_to_dataclass(_compose("algorithm.tpo_sequence_logp=median").actor_rollout_ref.actor)
