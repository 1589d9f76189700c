"""tpo_core.bridge.verl: the plugin through verl's entry point, and both routes' gradients vs the JAX engine.

The sequence log-prob is a token sum, so dL/d log_prob[i, t] = dL/dℓ_i on every response token of row i:
the check is that each valid token carries (p_i - q_i)/G (and padding carries 0), which is the issue's
"gradient w.r.t. log_prob per sequence" (a literal sum over the tokens would multiply it by the length).

The expected per-sequence gradient (p - q)/G comes from ``tpo_core.losses.tpo_target`` (the JAX engine)
and a softmax computed here; the code under test only produces the gradient that is checked.
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
from tpo_core.bridge import verl as V  # noqa: E402

G, K, T_LEN = 3, 4, 6


def _rollout(seed=0, groups=G, k=K, t=T_LEN):
    """A verl-like batch: token log-probs [N, T], a right-padded response mask, outcome reward on the last token."""
    rng = np.random.default_rng(seed)
    n = groups * k
    lengths = rng.integers(2, t + 1, n)
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.float32)
    old = -rng.uniform(0.1, 2.0, (n, t)).astype(np.float32) * mask
    scores = rng.integers(0, 2, n).astype(np.float32)
    scores[:k] = 1.0                                                        # one all-equal group
    rewards = np.zeros((n, t), np.float32)
    rewards[np.arange(n), lengths - 1] = scores
    uid = np.repeat(np.array([f"p{i}" for i in range(groups)], dtype=object), k)
    return dict(old=torch.tensor(old), mask=torch.tensor(mask), rewards=torch.tensor(rewards),
                scores=scores, uid=uid)


def _per_token(grad, mask):
    """The one gradient value every valid token of a row carries (asserting that they agree, and pads are 0)."""
    m = mask.bool()
    assert torch.all(grad[~m] == 0)
    first = grad[torch.arange(grad.shape[0]), 0]
    torch.testing.assert_close(grad * mask, first[:, None] * mask, rtol=1e-6, atol=1e-9)
    return first.numpy()


def _expected_seq_grad(seq_logp, seq_logp_old, scores, eta, groups):
    """(p - q)/G per sequence, q from the JAX engine; rows grouped contiguously [G, K]."""
    q = np.asarray(L.tpo_target(jnp.asarray(seq_logp_old.reshape(groups, -1)),
                                jnp.asarray(scores.reshape(groups, -1)), eta), np.float64)
    x = seq_logp.reshape(groups, -1).astype(np.float64)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return ((p - q) / groups).reshape(-1)


class _ActorCfg(dict):
    """The two fields verl's losses read from an ActorConfig."""

    def __init__(self, rollout_n, **info):
        super().__init__(rollout_n=rollout_n, global_batch_info=dict(info))
        self.rollout_n, self.global_batch_info = rollout_n, dict(info)


def test_plugin_loads_through_the_entry_point_and_both_names_resolve():
    code = ("import sys, importlib.metadata as md\n"
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
            "print('ok')\n")
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "auto"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]
    # with discovery off, nothing registers: the entry point (not a test import) is what loads it
    off = ("import verl\nfrom verl.trainer.ppo import core_algos as c\n"
           "assert 'tpo' not in c.ADV_ESTIMATOR_REGISTRY and 'tpo_group' not in c.POLICY_LOSS_REGISTRY\n")
    out = subprocess.run([sys.executable, "-c", off], env={**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"},
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]


def test_route_a_gpg_gradient_at_theta_old_is_p_minus_q_over_g():
    r = _rollout()
    eta = 0.5
    adv, ret = core_algos.get_adv_estimator_fn("tpo")(
        token_level_rewards=r["rewards"], response_mask=r["mask"], index=r["uid"],
        config=OmegaConf.create({"tpo_eta": eta}), old_log_probs=r["old"])
    assert torch.equal(adv, ret)
    log_prob = r["old"].clone().requires_grad_(True)                          # θ = θ_old
    loss, _ = core_algos.get_policy_loss_fn("gpg")(
        old_log_prob=r["old"], log_prob=log_prob, advantages=adv, response_mask=r["mask"].bool(),
        loss_agg_mode="seq-mean-token-sum", config=_ActorCfg(K))
    loss.backward()
    got = _per_token(log_prob.grad, r["mask"])          # -w_i/N on every token: the weight is per sequence
    seq_old = (r["old"] * r["mask"]).sum(-1).numpy()
    np.testing.assert_allclose(got, _expected_seq_grad(seq_old, seq_old, r["scores"], eta, G), atol=2e-7)


def test_route_a_without_old_log_probs_names_the_parameter():
    r = _rollout()
    with pytest.raises(ValueError, match="old_log_probs"):
        V.compute_tpo_advantage(r["rewards"], r["mask"], index=r["uid"])


@pytest.mark.parametrize("theta_moved", [False, True])
def test_route_b_gradient_is_p_minus_q_over_g_at_any_theta(theta_moved):
    r = _rollout(seed=3)
    eta = 2.0
    adv, _ = core_algos.get_adv_estimator_fn("tpo_group")(
        token_level_rewards=r["rewards"], response_mask=r["mask"], index=r["uid"],
        config=OmegaConf.create({"tpo_eta": eta}))
    shift = torch.tensor(np.random.default_rng(9).normal(0, 0.3, r["old"].shape), dtype=torch.float32)
    current = r["old"] + (shift * r["mask"] if theta_moved else 0.0)           # a later epoch: θ ≠ θ_old
    log_prob = current.clone().requires_grad_(True)
    loss, metrics = core_algos.get_policy_loss_fn("tpo_group")(
        old_log_prob=r["old"], log_prob=log_prob, advantages=adv, response_mask=r["mask"].bool(),
        loss_agg_mode="seq-mean-token-sum", config=_ActorCfg(K, dp_size=1, global_batch_size=G * K))
    loss.backward()
    got = _per_token(log_prob.grad, r["mask"])
    seq_old = (r["old"] * r["mask"]).sum(-1).numpy()
    seq_now = (current * r["mask"]).sum(-1).numpy()
    np.testing.assert_allclose(got, _expected_seq_grad(seq_now, seq_old, r["scores"], eta, G), atol=2e-7)
    # the loss value is the engine's mean group cross-entropy
    ref = float(L.tpo_loss(jnp.asarray(seq_now.reshape(G, K)), jnp.asarray(seq_old.reshape(G, K)),
                           jnp.asarray(r["scores"].reshape(G, K)), eta))
    assert loss.item() == pytest.approx(ref, rel=1e-5, abs=1e-6)
    assert {"actor/tpo_tv", "actor/tpo_entropy_q", "actor/tpo_entropy_p"} <= set(metrics)


def test_route_b_two_ranks_average_to_the_full_batch_gradient():
    r = _rollout(seed=5, groups=4)
    adv, _ = V.compute_tpo_group_advantage(r["rewards"], r["mask"], index=r["uid"])
    n = 4 * K
    full = r["old"].clone().requires_grad_(True)
    V.compute_policy_loss_tpo_group(r["old"], full, adv, r["mask"].bool(),
                                    config=_ActorCfg(K, dp_size=1, global_batch_size=n))[0].backward()
    grads = []
    for rank in (0, 1):                                                       # each rank holds 2 whole groups
        rows = slice(rank * n // 2, (rank + 1) * n // 2)
        x = r["old"][rows].clone().requires_grad_(True)
        V.compute_policy_loss_tpo_group(r["old"][rows], x, adv[rows], r["mask"][rows].bool(),
                                        config=_ActorCfg(K, dp_size=2, global_batch_size=n))[0].backward()
        grads.append(x.grad)
    dp_mean = torch.cat(grads) / 2                                            # DDP/FSDP average over ranks
    torch.testing.assert_close(dp_mean, full.grad, rtol=0, atol=1e-7)


def test_route_b_guard_raises_on_a_row_shuffled_micro_batch():
    r = _rollout(seed=1, groups=4)
    r["rewards"][:, :] = 0.0
    lengths = r["mask"].sum(-1).long()
    scores = np.tile([1.0, 0.0, 0.0, 0.0], 4)                                  # every group informative
    r["rewards"][torch.arange(4 * K), lengths - 1] = torch.tensor(scores, dtype=torch.float32)
    adv, _ = V.compute_tpo_group_advantage(r["rewards"], r["mask"], index=r["uid"])
    perm = torch.tensor(np.random.default_rng(0).permutation(4 * K))
    while all(len(set((perm[i * K:(i + 1) * K] // K).tolist())) == 1 for i in range(4)):
        perm = perm[torch.randperm(4 * K)]
    args = (r["old"][perm], r["old"][perm].clone().requires_grad_(True), adv[perm], r["mask"][perm].bool())
    with pytest.raises(ValueError, match="not whole groups"):
        V.compute_policy_loss_tpo_group(*args, config=_ActorCfg(K))
    # a micro-batch that is not a multiple of rollout_n, and a missing rollout_n
    with pytest.raises(ValueError, match="rollout_n"):
        V.compute_policy_loss_tpo_group(r["old"][:6], r["old"][:6], adv[:6], r["mask"][:6].bool(),
                                        config=_ActorCfg(K))
    with pytest.raises(ValueError, match="rollout_n"):
        V.compute_policy_loss_tpo_group(r["old"], r["old"], adv, r["mask"].bool(), config=_ActorCfg(0))


def test_old_log_prob_passthrough_feeds_verl_compute_advantage():
    from verl import DataProto
    from verl.trainer.ppo import ray_trainer

    from verl.trainer.ppo.v1 import utils as v1_utils                       # the default trainer (use_v1=true)

    assert getattr(ray_trainer.compute_advantage, "_tpo_passthrough", False), "plugin did not patch ray_trainer"
    assert v1_utils.compute_advantage is ray_trainer.compute_advantage      # v1 binds the patched function
    r = _rollout(seed=2)
    data = DataProto.from_dict(tensors={"token_level_rewards": r["rewards"], "response_mask": r["mask"],
                                        "old_log_probs": r["old"]},
                               non_tensors={"uid": r["uid"]})
    out = ray_trainer.compute_advantage(data, adv_estimator="tpo", num_repeat=K,
                                        config=OmegaConf.create({"tpo_eta": 1.0}))
    expect, _ = V.compute_tpo_advantage(r["rewards"], r["mask"], index=r["uid"], old_log_probs=r["old"])
    torch.testing.assert_close(out.batch["advantages"], expect)
    # another estimator goes to verl unchanged
    out = ray_trainer.compute_advantage(data, adv_estimator="grpo", num_repeat=K)
    assert out.batch["advantages"].shape == r["mask"].shape


def test_gsm8k_config_composes_and_its_actor_config_keeps_whole_groups():
    from hydra import compose, initialize_config_dir
    from verl.utils.config import omega_conf_to_dataclass

    with initialize_config_dir(config_dir=os.path.dirname(V.__file__), version_base=None):
        cfg = compose(config_name="verl_gsm8k")
    assert cfg.algorithm.adv_estimator == "tpo_group" and cfg.algorithm.tpo_eta == 1.0
    assert cfg.trainer.balance_batch is False
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    k = actor.rollout_n
    assert k == cfg.actor_rollout_ref.rollout.n == 16
    assert actor.policy_loss.loss_mode == "tpo_group" and not actor.shuffle and not actor.use_dynamic_bsz
    assert actor.ppo_micro_batch_size_per_gpu % k == 0
    # the real ActorConfig drives the loss
    r = _rollout(seed=4, groups=1, k=k)
    adv, _ = V.compute_tpo_group_advantage(r["rewards"], r["mask"], index=r["uid"])
    actor.global_batch_info.update(dp_size=1, global_batch_size=k)
    loss, _ = core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)(
        r["old"], r["old"], adv, r["mask"].bool(), actor.loss_agg_mode, actor)
    assert torch.isfinite(loss)
