"""TPO for verl: advantage estimators and policy losses, registered through verl's plugin entry point.

Target Policy Optimization (Kaddour 2026, arXiv 2604.06159; the paper's LLM runs used verl). verl
(tested with 0.9.1) loads every ``verl.plugins`` entry point at ``import verl`` (controlled by
``VERL_USE_EXTERNAL_PLUGINS``, default ``auto``); ``pip install "tpo_core[verl]"`` declares this
module as one, so importing verl registers:

================  ===================================  ==========================================
name              registry                             what
================  ===================================  ==========================================
``tpo``           ``algorithm.adv_estimator``          Route A: per-sequence weights
                                                       :math:`w_i = K (q_i - p^{old}_i)` on every token
``tpo_group``     ``algorithm.adv_estimator``          Route B: :math:`u_i/\\eta` on every token
``tpo_group``     ``actor.policy_loss.loss_mode``      Route B: the group cross-entropy
================  ===================================  ==========================================

**Route A — exact for one update per rollout.** ``adv_estimator=tpo`` with verl's own
``loss_mode=gpg`` (loss :math:`-\\log\\pi \\cdot A`, no ratio) and ``loss_agg_mode=seq-mean-token-sum``:
the loss is :math:`-\\frac1N\\sum_i w_i \\sum_t \\log\\pi(y_{it})` whose gradient at θ_old is TPO's,
:math:`\\frac1G\\sum_i (p_i - q_i)\\nabla\\ell_i`, under any row order, micro-batching or DP sharding.
Exact only at θ = θ_old: one optimizer step per rollout (``ppo_epochs=1``,
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
``+algorithm.tpo_seq_reduce=sum`` (``sum`` is the paper's; ``mean`` the length-normalised ablation).
See ``tpo_core/bridge/verl_gsm8k.yaml`` for a ready GSM8K run.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any

import numpy as np
import torch

from . import torch_ops as T

ADV_TPO = "tpo"
ADV_TPO_GROUP = "tpo_group"
LOSS_TPO_GROUP = "tpo_group"
GUARD_TOL = 1e-4  # |Σ u/η| allowed per chunk, relative to Σ |u/η| (float32 advantages)


def _config_get(config, key: str, default):
    """``config.key`` for dataclass / omegaconf configs, ``config[key]`` for mappings; default when absent."""
    if config is None:
        return default
    try:
        value = getattr(config, key)
    except Exception:  # noqa: BLE001 - AttributeError, omegaconf's struct-mode errors
        getter = getattr(config, "get", None)
        try:
            value = getter(key, default) if getter is not None else default
        except Exception:  # noqa: BLE001
            value = default
    return default if value is None else value


def _row_scores(token_level_rewards: torch.Tensor) -> torch.Tensor:
    return token_level_rewards.sum(-1)  # outcome reward: verl puts it on the last response token


# --------------------------------------------------------------------------------------------
# advantage estimators (pure torch: callable without verl)
# --------------------------------------------------------------------------------------------
def compute_tpo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                          index: np.ndarray | None = None, config=None,
                          old_log_probs: torch.Tensor | None = None, **_: Any):
    r"""Route A: :math:`A_{it} = w_i = K\,(q_i - p^{old}_i)` on every response token of row i.

    ``index`` holds each row's prompt uid (rows in any order; groups must be whole, of one size K);
    ``old_log_probs`` ``[N, T]`` the rollout policy's token log-probs (see the module note: verl needs
    :func:`install_old_log_prob_passthrough` to pass them). Returns ``(advantages, returns)``, equal.
    """
    if old_log_probs is None:
        raise ValueError("old_log_probs is required by adv_estimator=tpo (p_old of each group); verl does not "
                         "pass it to custom estimators: import tpo_core.bridge.verl (the plugin installs "
                         "install_old_log_prob_passthrough) or use Route B (adv_estimator=tpo_group)")
    if index is None:
        raise ValueError("index (the rows' prompt uids) is required by adv_estimator=tpo")
    eta = T.check_eta(_config_get(config, "tpo_eta", 1.0))
    reduce = _config_get(config, "tpo_seq_reduce", "sum")
    mask = response_mask.to(old_log_probs.dtype)
    with torch.no_grad():
        seq_old = T.sequence_logp(old_log_probs.float(), mask.float(), reduce=reduce)
        w = T.tpo_sequence_weights(seq_old, _row_scores(token_level_rewards).float(), list(index), eta)
        adv = (w[:, None] * mask.float()).to(token_level_rewards.dtype)
    return adv, adv


def compute_tpo_group_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                index: np.ndarray | None = None, config=None, **_: Any):
    r"""Route B: :math:`A_{it} = u_i/\eta` on every response token (u: the group z-score, 1e-6 rule).

    The loss ``tpo_group`` turns it into the target with the micro-batch's own old log-probs.
    """
    if index is None:
        raise ValueError("index (the rows' prompt uids) is required by adv_estimator=tpo_group")
    eta = T.check_eta(_config_get(config, "tpo_eta", 1.0))
    scores = _row_scores(token_level_rewards).float()
    with torch.no_grad():
        idx = T.group_index(list(index), device=scores.device)
        u = torch.empty_like(scores)
        u[idx.reshape(-1)] = T.standardize(scores[idx]).reshape(-1) / eta
        adv = (u[:, None] * response_mask.float()).to(token_level_rewards.dtype)
    return adv, adv


# --------------------------------------------------------------------------------------------
# the Route B policy loss (pure torch)
# --------------------------------------------------------------------------------------------
def compute_policy_loss_tpo_group(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                  response_mask: torch.Tensor, loss_agg_mode: str = "seq-mean-token-sum",
                                  config=None, rollout_is_weights: torch.Tensor | None = None):
    r"""Route B: TPO's group cross-entropy over chunks of ``rollout_n`` rows of the micro-batch.

    .. math:: L = \frac{\text{dp\_size}}{G_{global}} \sum_{g \in \text{micro-batch}}
              -\sum_{i\in g} q_i \log\mathrm{softmax}(\ell)_i,\quad
              q = \mathrm{softmax}(\log\mathrm{softmax}(\ell_{old}) + a),\quad
              \ell_i = \textstyle\sum_t m_{it}\log\pi_\theta(y_{it})

    with :math:`a_i = u_i/\eta` read back from ``advantages`` (estimator ``tpo_group``) and
    :math:`G_{global}` = ``global_batch_size / rollout_n`` groups per mini-batch over all ranks
    (verl's ``config.global_batch_info``; the local micro-batch otherwise). After DP averaging the
    gradient per sequence is :math:`(p_i - q_i)/G_{global}`. ``loss_agg_mode`` is ignored (the group
    is the unit); ``config.tpo_seq_reduce`` is not available here: sequences are token sums.
    """
    if rollout_is_weights is not None:
        raise ValueError("rollout_is_weights: importance-weight rollout correction is not defined for "
                         "loss_mode=tpo_group; disable algorithm.rollout_correction")
    k = int(_config_get(config, "rollout_n", 0) or 0)
    n = log_prob.shape[0]
    if k < 2:
        raise ValueError(f"config.rollout_n must be the group size K >= 2 for loss_mode=tpo_group, got {k}")
    if n % k:
        raise ValueError(f"micro-batch of {n} rows is not a whole number of groups of rollout_n={k}: set "
                         "ppo_micro_batch_size_per_gpu to a multiple of rollout_n and use_dynamic_bsz=False")
    mask = response_mask.to(log_prob.dtype)
    n_tok = mask.sum(-1)
    a = ((advantages.to(log_prob.dtype) * mask).sum(-1) / n_tok.clamp_min(1.0)).detach().view(-1, k)
    drift = (a.sum(-1).abs() > GUARD_TOL * (1.0 + a.abs().sum(-1)))
    if bool(drift.any()):
        bad = drift.nonzero().flatten().tolist()
        raise ValueError(f"advantages: chunks {bad} of rollout_n={k} rows are not whole groups (their u/eta do not "
                         "sum to 0): rows were shuffled or a group was split; set actor.shuffle=False, "
                         "use_dynamic_bsz=False, trainer.balance_batch=False")
    seq = T.sequence_logp(log_prob, mask).view(-1, k)
    seq_old = T.sequence_logp(old_log_prob.to(log_prob.dtype), mask).view(-1, k).detach()
    q = torch.softmax(torch.log_softmax(seq_old, -1) + a, -1).detach()
    log_p = torch.log_softmax(seq, -1)
    per_group = -(q * log_p).sum(-1)
    info = dict(_config_get(config, "global_batch_info", {}) or {})
    dp_size = int(info.get("dp_size") or 1)
    global_rows = info.get("global_batch_size")
    groups = (float(global_rows) / k) if global_rows else float(per_group.shape[0])
    loss = per_group.sum() / groups * dp_size
    with torch.no_grad():
        p = log_p.exp()
        metrics = {"actor/tpo_tv": float(0.5 * (q - p).abs().sum(-1).mean()),
                   "actor/tpo_entropy_q": float(-(q * q.clamp_min(1e-30).log()).sum(-1).mean()),
                   "actor/tpo_entropy_p": float(-(p * log_p).sum(-1).mean())}
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
            raise ValueError("old_log_probs missing from the batch: adv_estimator=tpo needs them (verl computes "
                             "them before the advantage unless bypass mode is on)")
        adv, ret = get_adv_estimator_fn(ADV_TPO)(
            token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"],
            index=data.non_tensor_batch["uid"], config=kwargs.get("config"),
            old_log_probs=data.batch["old_log_probs"])
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
                        return original.create_module(spec_)

                    def exec_module(self, module):
                        original.exec_module(module)
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
