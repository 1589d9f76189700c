"""TPO for verl: advantage estimators and policy losses, registered through verl's plugin entry point.

Target Policy Optimization (Kaddour 2026, arXiv 2604.06159; the paper's LLM runs used verl). verl
(tested with 0.9.1) loads every ``verl.plugins`` entry point at ``import verl`` (controlled by
``VERL_USE_EXTERNAL_PLUGINS``, default ``auto``); ``pip install "tpo_core[verl]"`` declares this
module as one, so importing verl registers:

================  ===================================  ==========================================
name              registry                             what
================  ===================================  ==========================================
``tpo``           ``algorithm.adv_estimator``          Route A: per-token weights
                                                       :math:`K (q_i - p^{old}_i)`, divided by the
                                                       length for the ``mean`` score
``tpo_group``     ``algorithm.adv_estimator``          Route B: :math:`u_i/\\eta` on every token
``tpo_group``     ``actor.policy_loss.loss_mode``      Route B: the group cross-entropy
================  ===================================  ==========================================

**The sequence score ℓ_i: an explicit choice.** ``"sum"`` is the paper's definition,
:math:`\\ell_i = \\sum_t \\log\\pi(y_{it})`, the exact log-probability of the completion (the
paper-literal form). ``"mean"``, :math:`\\ell_i = \\frac{1}{n_i}\\sum_t \\log\\pi(y_{it})`, is the
length-normalised score of the author's TargetPO trainer proposed to TRL (huggingface/trl PR #5591,
``tpo_length_normalize_logps=True`` by default there: with sums the group softmax p_old collapses to
near one-hot on the shortest completion and the reward term cannot move it). **The default here is
``"mean"``.** Our own SmolLM2 runs agree: with sums the target did not move (median TV(q, p_old) 0.002
per step); with means it moved every step (TV 0.16–0.77). ``"sum"`` is one flag away:

* Route A reads ``algorithm.tpo_sequence_logp`` (``+algorithm.tpo_sequence_logp=sum``);
* Route B's loss reads ``actor.policy_loss.tpo_sequence_logp``. verl builds ``PolicyLossConfig`` as a
  closed dataclass, so the key exists only with ``policy_loss._target_`` set to
  :class:`TPOPolicyLossConfig` (as ``verl_gsm8k.yaml`` does, interpolating the algorithm key so one
  flag sets both); with verl's plain ``PolicyLossConfig`` the loss uses the default, ``"mean"``.

The old key ``algorithm.tpo_seq_reduce`` (default ``sum``) raises a ``ValueError`` naming its
replacement instead of being ignored.

**Route A — exact for one update per rollout.** ``adv_estimator=tpo`` with verl's own
``loss_mode=gpg`` (loss :math:`-\\log\\pi \\cdot A`, no ratio) and ``loss_agg_mode=seq-mean-token-sum``
(for either score). The estimator puts :math:`A_{it} = K(q_i - p^{old}_i)` (``sum``) or
:math:`K(q_i - p^{old}_i)/n_i` (``mean``) on every response token of row i; the loss
:math:`-\\frac1N\\sum_i\\sum_t A_{it}\\log\\pi(y_{it})` then has the gradient of TPO at θ_old,
:math:`\\frac1G\\sum_i (p_i - q_i)\\nabla\\ell_i`, under any row order, micro-batching or DP sharding
(N = G·K rows: verl's ``global_batch_size`` counts every row of the mini-batch). Exact only at
θ = θ_old: one optimizer step per rollout (``ppo_epochs=1``,
``ppo_mini_batch_size = data.train_batch_size``); later steps would need the current group softmax.

**Route B — exact for several epochs / mini-batches.** ``adv_estimator=tpo_group`` with
``loss_mode=tpo_group``: each micro-batch is cut into chunks of ``rollout_n`` rows, each chunk must be
one whole group, and the loss is :math:`\\frac{1}{G}\\sum_{g}-\\sum_{i\\in g} q_i\\log\\mathrm{softmax}(\\ell(\\theta))_i`
with :math:`q = \\mathrm{softmax}(\\log\\mathrm{softmax}(\\ell_{old}) + u/\\eta)` from the micro-batch's own
``old_log_probs``. Whole groups per micro-batch need ``actor.shuffle=False``,
``actor.use_dynamic_bsz=False``, ``trainer.balance_batch=False`` (it reorders rows across DP ranks by
length) and micro- and mini-batch sizes that are multiples of ``rollout_n`` (verl's
``ppo_mini_batch_size`` counts prompts, so it is). A guard raises when a chunk's u do not sum to ≈ 0
(a whole group's z-scores sum to 0 exactly; a chunk that mixes groups almost never does — all-equal
groups have u = 0 and cannot be told apart, harmlessly: their target is p_old either way).

**Both routes, the group maths:**

* *float64*: the [groups, K] softmax, the target, the weights and the loss run in float64 whatever the
  model's dtype; Route B's loss is cast back to the model's dtype (its gradient flows back in float64 to
  the token log-probs), Route A's weights to the advantages' dtype. In float32 the direction of
  :math:`p - q` is rounding noise once TV(q, p_old) ≲ 1e-7 (a group whose one success sits 20–30 nats
  below the most likely completion: TV ≈ 1e-9).
* *All-masked rows*: a row whose response mask is all zero (verl's sequence-level rejection sampling,
  ``algorithm.rollout_correction.rollout_rs``, zeroes whole rows of ``response_mask``:
  ``verl/trainer/ppo/rollout_corr_helper.py:1061``) is left out of the standardisation, the group
  softmax, the target and the diagnostics (``valid = mask.any(-1)``); it gets q = 0 and no gradient.
  Otherwise its ℓ = 0, the largest possible score, would take nearly all of p_old. G still counts
  every group (a fully masked group contributes 0).

**KL to the reference model (verl's own).** With ``actor.use_kl_loss=true`` verl adds
``kl_loss_coef · agg_loss(kl_penalty(log_prob, ref_log_prob, kl_loss_type), response_mask,
loss_agg_mode)`` to whatever the registered policy loss returns, for every ``loss_mode``
(``verl/workers/utils/losses.py:131-142`` in 0.9.1, the only actor loss path there), so it applies
with ``tpo_group`` and with ``gpg`` unchanged. ``kl_loss_type=low_var_kl`` is k3,
:math:`r - \\log r - 1` with :math:`r = \\pi_{ref}/\\pi_\\theta` per token, clamped
(``core_algos.py:2237-2244``). Route B's TPO term ignores ``loss_agg_mode``; it sets only how the KL
(and entropy) terms aggregate: verl's default ``token-mean`` matches a GRPO run's KL. Route A needs
``seq-mean-token-sum``, which makes the KL a per-sequence token *sum* (stronger at the same coefficient).
TPO's own anchor is p_old inside q; the reference-model KL is an addition (the paper's GSM8K runs
used 1e-3 for both TPO and GRPO).

**Old log-probs for the estimator.** verl 0.9.1's ``compute_advantage`` passes custom estimators
``token_level_rewards``, ``response_mask``, ``index`` (uid) and ``config`` only, not
``old_log_probs`` (it does for its own optimal-token-baseline estimators, by name), yet Route A needs
:math:`p_{old}`. Workaround (installed by this plugin): :func:`install_old_log_prob_passthrough` wraps
``verl.trainer.ppo.ray_trainer.compute_advantage`` so that for ``adv_estimator=tpo`` it calls the
estimator with ``old_log_probs=data.batch["old_log_probs"]`` (present by then: verl recomputes the
old log-probs with the trainer's engine before the advantage). It patches at import of that
module, through an import hook, so Ray's TaskRunner process gets it too; the default v1 trainer
(``trainer.use_v1=true``) calls the same function through ``verl.trainer.ppo.v1.utils``. The upstream change
that would remove it: pass ``old_log_probs`` (when present in ``data.batch``) to every registered
estimator that accepts it. Route B needs none of this: the loss receives ``old_log_prob``.

Use ``old_log_probs`` recomputed by the trainer (verl's default, ``use_rollout_log_probs=False``),
not the inference engine's: vLLM/SGLang log-probs differ from FSDP's by kernel and precision
noise, which p_old of a *sequence* (a sum over hundreds of tokens) amplifies.

Hyper-parameters come from the algorithm config: ``+algorithm.tpo_eta=1.0`` (η) and
``+algorithm.tpo_sequence_logp=mean`` (or ``sum``). See ``tpo_core/bridge/verl_gsm8k.yaml`` for a
ready GSM8K run.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import torch_ops as T

ADV_TPO = "tpo"
ADV_TPO_GROUP = "tpo_group"
LOSS_TPO_GROUP = "tpo_group"
GUARD_TOL = 1e-4  # |Σ u/η| allowed per chunk, relative to Σ |u/η| (float32 advantages)
SEQUENCE_SCORES = ("mean", "sum")
DEFAULT_SEQUENCE_SCORE = "mean"  # the author's TRL trainer; "sum" is the paper-literal ℓ = Σ_t log π
GROUP_DTYPE = torch.float64  # dtype of the [groups, K] softmax, target, weights and loss


def _config_get(config, key: str, default):
    """``config.key`` for dataclass / omegaconf configs, ``config[key]`` for mappings; default when absent."""
    if config is None:
        return default
    try:
        value = getattr(config, key)
    except Exception:  # AttributeError, omegaconf's struct-mode errors
        getter = getattr(config, "get", None)
        try:
            value = getter(key, default) if getter is not None else default
        except Exception:  # ImportError, or a verl that fails to import
            value = default
    return default if value is None else value


def check_sequence_score(value, name: str = "tpo_sequence_logp") -> str:
    """``"mean"`` or ``"sum"``; anything else raises ``ValueError`` naming ``name``."""
    if not isinstance(value, str) or value not in SEQUENCE_SCORES:
        raise ValueError(
            f"{name} must be one of {SEQUENCE_SCORES} ('sum': the paper's ℓ = Σ_t log π; "
            f"'mean': length-normalised, the default), got {value!r}"
        )
    return value


def algorithm_sequence_score(config) -> str:
    """The sequence score set by ``algorithm.tpo_sequence_logp`` (default ``"mean"``)."""
    if _config_get(config, "tpo_seq_reduce", None) is not None:
        raise ValueError(
            "algorithm.tpo_seq_reduce was renamed algorithm.tpo_sequence_logp (and its default is "
            "now 'mean'; 'sum' is the paper-literal score): set algorithm.tpo_sequence_logp instead"
        )
    return check_sequence_score(
        _config_get(config, "tpo_sequence_logp", DEFAULT_SEQUENCE_SCORE), "algorithm.tpo_sequence_logp"
    )


def loss_sequence_score(config) -> str:
    """The sequence score of Route B's loss: ``actor.policy_loss.tpo_sequence_logp`` (default ``"mean"``)."""
    policy_loss = _config_get(config, "policy_loss", None)
    return check_sequence_score(
        _config_get(policy_loss, "tpo_sequence_logp", DEFAULT_SEQUENCE_SCORE), "actor.policy_loss.tpo_sequence_logp"
    )


try:  # the config class exists only where verl does; the pure-torch functions below do not need it
    from verl.workers.config import PolicyLossConfig as _VerlPolicyLossConfig
except Exception:
    _VerlPolicyLossConfig = None

if _VerlPolicyLossConfig is not None:

    @dataclass
    class TPOPolicyLossConfig(_VerlPolicyLossConfig):
        """verl's ``PolicyLossConfig`` plus TPO's sequence score (``actor.policy_loss._target_``).

        ``tpo_sequence_logp``: ``"mean"`` (default; the author's TRL trainer) or ``"sum"`` (the paper's
        ℓ = Σ_t log π, the exact sequence log-probability).
        """

        tpo_sequence_logp: str = DEFAULT_SEQUENCE_SCORE

        def __post_init__(self):
            check_sequence_score(self.tpo_sequence_logp, "actor.policy_loss.tpo_sequence_logp")


def _row_scores(token_level_rewards: torch.Tensor) -> torch.Tensor:
    return token_level_rewards.sum(-1)  # outcome reward: verl puts it on the last response token


# --------------------------------------------------------------------------------------------
# the group maths, float64, with invalid (all-masked) members left out
# --------------------------------------------------------------------------------------------
def _masked_log_softmax(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    lowest = torch.finfo(x.dtype).min  # exp(.) == 0 for invalid members, no NaN, no gradient
    return torch.log_softmax(torch.where(valid, x, torch.full_like(x, lowest)), dim=-1)


def group_target(seq_old: torch.Tensor, tilt: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    r""":math:`q = \mathrm{softmax}(\log\mathrm{softmax}(\ell_{old}) + u/\eta)` over the valid members, ``[G, K]``.

    ``tilt`` is :math:`u/\eta`; invalid members get q = 0. Computed in float64 (returned as float64, detached).
    """
    seq_old, tilt = seq_old.detach().to(GROUP_DTYPE), tilt.detach().to(GROUP_DTYPE)
    logits = _masked_log_softmax(seq_old, valid) + tilt
    q = torch.softmax(torch.where(valid, logits, torch.full_like(logits, torch.finfo(GROUP_DTYPE).min)), -1)
    return torch.where(valid, q, torch.zeros_like(q))


def _group_softmax(seq: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    p = _masked_log_softmax(seq, valid).exp()
    return torch.where(valid, p, torch.zeros_like(p))


def _group_metrics(q: torch.Tensor, p: torch.Tensor, p_old: torch.Tensor, valid: torch.Tensor) -> dict:
    """Means over the groups that have a valid member (float64 inputs)."""

    def entropy(x):
        return -torch.where(x > 0, x * torch.log(torch.where(x > 0, x, torch.ones_like(x))), torch.zeros_like(x)).sum(
            -1
        )

    has = valid.any(-1)
    n = has.sum().clamp_min(1)

    def mean(x):
        return float(torch.where(has, x, torch.zeros_like(x)).sum() / n)

    return {
        "actor/tpo_tv": mean(0.5 * (q - p).abs().sum(-1)),
        "actor/tpo_tv_old": mean(0.5 * (q - p_old).abs().sum(-1)),
        "actor/tpo_entropy_q": mean(entropy(q)),
        "actor/tpo_entropy_p": mean(entropy(p)),
        "actor/tpo_valid_frac": float(valid.to(GROUP_DTYPE).mean()),
    }


# --------------------------------------------------------------------------------------------
# advantage estimators (pure torch: callable without verl)
# --------------------------------------------------------------------------------------------
def compute_tpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config=None,
    old_log_probs: torch.Tensor | None = None,
    **_: Any,
):
    r"""Route A: :math:`A_{it} = K\,(q_i - p^{old}_i)` (``sum``) or that over :math:`n_i` (``mean``).

    ``index`` holds each row's prompt uid (rows in any order; groups must be whole, of one size K);
    ``old_log_probs`` ``[N, T]`` the rollout policy's token log-probs (see the module note: verl needs
    :func:`install_old_log_prob_passthrough` to pass them). ``config``: the algorithm config
    (``tpo_eta``, ``tpo_sequence_logp``). With ``gpg`` and ``seq-mean-token-sum`` the gradient at θ_old
    is :math:`\frac1G\sum_i (p_i - q_i)\nabla\ell_i` for the chosen score. Rows whose mask is all zero
    are left out of the group (A = 0). Group maths in float64. Returns ``(advantages, returns)``, equal.
    """
    if old_log_probs is None:
        raise ValueError(
            "old_log_probs is required by adv_estimator=tpo (p_old of each group); verl does not "
            "pass it to custom estimators: import tpo_core.bridge.verl (the plugin installs "
            "install_old_log_prob_passthrough) or use Route B (adv_estimator=tpo_group)"
        )
    if index is None:
        raise ValueError("index (the rows' prompt uids) is required by adv_estimator=tpo")
    if tuple(old_log_probs.shape) != tuple(response_mask.shape):
        raise ValueError(
            f"old_log_probs must have the shape of response_mask {tuple(response_mask.shape)}, "
            f"got {tuple(old_log_probs.shape)}"
        )
    eta = T.check_eta(_config_get(config, "tpo_eta", 1.0))
    score = algorithm_sequence_score(config)
    with torch.no_grad():
        mask = response_mask.to(GROUP_DTYPE)
        n_tok = mask.sum(-1)
        seq_old = T.sequence_logp(old_log_probs.to(GROUP_DTYPE), mask, reduce=score)
        idx = T.group_index(list(index), device=seq_old.device)
        k = idx.shape[1]
        valid = (n_tok > 0)[idx]
        tilt = T.standardize(_row_scores(token_level_rewards).to(GROUP_DTYPE)[idx], valid) / eta
        q = group_target(seq_old[idx], tilt, valid)
        p_old = _group_softmax(seq_old[idx], valid)
        w = torch.zeros_like(seq_old)
        w[idx.reshape(-1)] = (k * (q - p_old)).reshape(-1)  # N/G = K
        if score == "mean":
            w = w / n_tok.clamp_min(1.0)  # ∂ℓ_i/∂log π_it = 1/n_i
        adv = (w[:, None] * mask).to(token_level_rewards.dtype)
    return adv, adv


def compute_tpo_group_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config=None,
    **_: Any,
):
    r"""Route B: :math:`A_{it} = u_i/\eta` on every response token (u: the group z-score, 1e-6 rule).

    The z-score runs over the group's valid rows (response mask not all zero); invalid rows get 0.
    The loss ``tpo_group`` turns it into the target with the micro-batch's own old log-probs.
    ``config.tpo_sequence_logp`` is only validated here: Route B's loss reads
    ``actor.policy_loss.tpo_sequence_logp``.
    """
    if index is None:
        raise ValueError("index (the rows' prompt uids) is required by adv_estimator=tpo_group")
    eta = T.check_eta(_config_get(config, "tpo_eta", 1.0))
    algorithm_sequence_score(config)
    with torch.no_grad():
        scores = _row_scores(token_level_rewards).to(GROUP_DTYPE)
        idx = T.group_index(list(index), device=scores.device)
        valid = response_mask.bool().any(-1)[idx]
        u = torch.zeros_like(scores)
        u[idx.reshape(-1)] = (T.standardize(scores[idx], valid) / eta).reshape(-1)
        adv = (u[:, None] * response_mask.to(GROUP_DTYPE)).to(token_level_rewards.dtype)
    return adv, adv


# --------------------------------------------------------------------------------------------
# the Route B policy loss (pure torch)
# --------------------------------------------------------------------------------------------
def compute_policy_loss_tpo_group(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-sum",
    config=None,
    rollout_is_weights: torch.Tensor | None = None,
):
    r"""Route B: TPO's group cross-entropy over chunks of ``rollout_n`` rows of the micro-batch.

    .. math:: L = \frac{\text{dp\_size}}{G_{global}} \sum_{g \in \text{micro-batch}}
              -\sum_{i\in g} q_i \log\mathrm{softmax}(\ell)_i,\quad
              q = \mathrm{softmax}(\log\mathrm{softmax}(\ell_{old}) + a)

    with :math:`\ell_i = \sum_t m_{it}\log\pi_\theta(y_{it})` (``"sum"``, the paper's) or that over
    :math:`n_i = \sum_t m_{it}` (``"mean"``, the default), chosen by
    ``config.policy_loss.tpo_sequence_logp`` (:class:`TPOPolicyLossConfig`); :math:`a_i = u_i/\eta` read
    back from ``advantages`` (estimator ``tpo_group``) and :math:`G_{global}` =
    ``global_batch_size / rollout_n`` groups per mini-batch over all ranks (verl's
    ``config.global_batch_info``; the local micro-batch otherwise). After DP averaging the gradient per
    sequence score is :math:`(p_i - q_i)/G_{global}`. Rows with an all-zero mask are left out of the
    group softmax, the target and the metrics. The group maths runs in float64; the loss is returned in
    ``log_prob``'s dtype. ``loss_agg_mode`` is ignored (the group is the unit; verl applies it to its
    own KL and entropy terms).
    """
    if rollout_is_weights is not None:
        raise ValueError(
            "rollout_is_weights: importance-weight rollout correction is not defined for "
            "loss_mode=tpo_group; disable algorithm.rollout_correction"
        )
    k = int(_config_get(config, "rollout_n", 0) or 0)
    n = log_prob.shape[0]
    if k < 2:
        raise ValueError(f"config.rollout_n must be the group size K >= 2 for loss_mode=tpo_group, got {k}")
    if n % k:
        raise ValueError(
            f"micro-batch of {n} rows is not a whole number of groups of rollout_n={k}: set "
            "ppo_micro_batch_size_per_gpu to a multiple of rollout_n and use_dynamic_bsz=False"
        )
    score = loss_sequence_score(config)
    mask = response_mask.to(GROUP_DTYPE)
    n_tok = mask.sum(-1)
    valid = (n_tok > 0).view(-1, k)
    a = ((advantages.detach().to(GROUP_DTYPE) * mask).sum(-1) / n_tok.clamp_min(1.0)).view(-1, k)
    drift = a.sum(-1).abs() > GUARD_TOL * (1.0 + a.abs().sum(-1))
    if bool(drift.any()):
        bad = drift.nonzero().flatten().tolist()
        raise ValueError(
            f"advantages: chunks {bad} of rollout_n={k} rows are not whole groups (their u/eta do not "
            "sum to 0): rows were shuffled or a group was split; set actor.shuffle=False, "
            "use_dynamic_bsz=False, trainer.balance_batch=False"
        )
    seq = T.sequence_logp(log_prob.to(GROUP_DTYPE), mask, reduce=score).view(-1, k)
    seq_old = T.sequence_logp(old_log_prob.detach().to(GROUP_DTYPE), mask, reduce=score).view(-1, k)
    q = group_target(seq_old, a, valid)
    log_p = _masked_log_softmax(seq, valid)
    per_group = -torch.where(valid, q * log_p, torch.zeros_like(log_p)).sum(-1)
    info = dict(_config_get(config, "global_batch_info", {}) or {})
    dp_size = int(info.get("dp_size") or 1)
    global_rows = info.get("global_batch_size")
    groups = (float(global_rows) / k) if global_rows else float(per_group.shape[0])
    loss = (per_group.sum() / groups * dp_size).to(log_prob.dtype)
    with torch.no_grad():
        metrics = _group_metrics(q, _group_softmax(seq.detach(), valid), _group_softmax(seq_old, valid), valid)
    return loss, metrics


# --------------------------------------------------------------------------------------------
# registration with verl (only when verl is importable)
# --------------------------------------------------------------------------------------------
def _compute_advantage_with_old_log_probs(original):
    def compute_advantage(data, adv_estimator, *args, **kwargs):
        name = getattr(adv_estimator, "value", adv_estimator)
        if name != ADV_TPO:
            return original(data, adv_estimator, *args, **kwargs)
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn

        if "response_mask" not in data.batch.keys():
            from verl.trainer.ppo.ray_trainer import compute_response_mask

            data.batch["response_mask"] = compute_response_mask(data)
        if "old_log_probs" not in data.batch.keys():
            raise ValueError(
                "old_log_probs missing from the batch: adv_estimator=tpo needs them (verl computes "
                "them before the advantage unless bypass mode is on)"
            )
        adv, ret = get_adv_estimator_fn(ADV_TPO)(
            token_level_rewards=data.batch["token_level_rewards"],
            response_mask=data.batch["response_mask"],
            index=data.non_tensor_batch["uid"],
            config=kwargs.get("config"),
            old_log_probs=data.batch["old_log_probs"],
        )
        data.batch["advantages"], data.batch["returns"] = adv, ret
        return data

    compute_advantage.__wrapped__ = original
    compute_advantage._tpo_passthrough = True
    return compute_advantage


def _patch_module(module) -> None:
    current = getattr(module, "compute_advantage", None)
    if current is not None and not getattr(current, "_tpo_passthrough", False):
        module.compute_advantage = _compute_advantage_with_old_log_probs(current)


_TARGET = "verl.trainer.ppo.ray_trainer"


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches ``verl.trainer.ppo.ray_trainer`` right after it executes (wherever it is imported)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = getattr(finder, "find_spec", lambda *a: None)(fullname, path, target)
            if spec is not None and spec.loader is not None:
                original = spec.loader

                class _Loader(importlib.abc.Loader):
                    def create_module(self, spec_):
                        return original.create_module(spec_)  # noqa: B023 (built and returned in this iteration)

                    def exec_module(self, module):
                        original.exec_module(module)  # noqa: B023
                        _patch_module(module)

                spec.loader = _Loader()
                return spec
        return None


def install_old_log_prob_passthrough() -> None:
    """Make verl's ``compute_advantage`` pass ``old_log_probs`` to ``adv_estimator=tpo`` (idempotent)."""
    if _TARGET in sys.modules:
        _patch_module(sys.modules[_TARGET])
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def register() -> bool:
    """Register the estimators and the loss in verl's registries; False when verl is not installed."""
    try:
        from verl.trainer.ppo import core_algos
    except ImportError:
        return False
    for name, fn in ((ADV_TPO, compute_tpo_advantage), (ADV_TPO_GROUP, compute_tpo_group_advantage)):
        if core_algos.ADV_ESTIMATOR_REGISTRY.get(name) is not fn:
            core_algos.ADV_ESTIMATOR_REGISTRY.pop(name, None)
            core_algos.register_adv_est(name)(fn)
    core_algos.register_policy_loss(LOSS_TPO_GROUP)(compute_policy_loss_tpo_group)
    install_old_log_prob_passthrough()
    return True


REGISTERED = register()
