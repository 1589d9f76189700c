"""Every loss of the paper side by side, as pure functions over a trailing group axis.

Conventions (shared by every function here):

* the **group** (the K completions of one prompt, or the K candidate tokens of one state) is the
  last axis; every leading axis is a batch axis and is averaged unless a docstring says otherwise;
* ``logp`` are log-probabilities under the policy being trained, ``logp_old`` the frozen rollout
  (behaviour) log-probabilities; for sequences they are the **sum** of token log-probs;
* ``scores`` are raw rewards; each method standardises them itself.

All functions are jit/vmap/grad friendly. Arguments that are plain Python numbers or static shapes
are validated eagerly and raise ``ValueError`` naming the parameter (the configs' rules, :mod:`tpo_core.checks`;
a traced η is checked by the config it came from).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import checks
from .constants import GRPO_EPS, STD_FLOOR


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------
def _check_group(name: str, x) -> None:
    if jnp.ndim(x) < 1 or jnp.shape(x)[-1] < 2:
        raise ValueError(f"{name} needs a group axis (last) of size K >= 2, got shape {jnp.shape(x)}")


def _check_same_shape(**arrays) -> None:
    shapes = {name: jnp.shape(a) for name, a in arrays.items() if a is not None}
    if len(set(shapes.values())) > 1:
        described = ", ".join(f"{n}{s}" for n, s in shapes.items())
        raise ValueError(f"shapes disagree: {described}")


# --------------------------------------------------------------------------------------------
# scores -> standardised utilities
# --------------------------------------------------------------------------------------------
def _centred(scores, ddof: int):
    """(c, σ): the scores minus their group mean, and the group std (keepdims), population std for ``ddof=0``."""
    scores = jnp.asarray(scores, jnp.float32)
    k = scores.shape[-1]
    c = scores - scores.mean(-1, keepdims=True)
    return c, jnp.sqrt((c**2).sum(-1, keepdims=True) / (k - ddof))


def standardize(scores, *, ddof: int = 0, floor: float = STD_FLOOR):
    r"""Group z-score with the paper's zero-variance rule.

    .. math:: c = s - \bar s,\qquad u = c/\sigma \text{ if } \sigma > \text{floor else } c

    ``ddof=0`` is the population std (paper); ``ddof=1`` the sample std (TRL/verl).
    An all-equal group gives ``u = 0`` exactly.
    """
    _check_group("scores", scores)
    c, sigma = _centred(scores, ddof)
    safe = sigma > floor
    return jnp.where(safe, c / jnp.where(safe, sigma, 1.0), c)


def group_std(scores, *, ddof: int = 0):
    """Std of the scores over the group axis (population by default)."""
    return _centred(scores, ddof)[1][..., 0]


def zero_variance(scores):
    """True for groups whose scores are all equal (std <= 1e-6): they carry no signal."""
    return group_std(scores) <= STD_FLOOR


# --------------------------------------------------------------------------------------------
# TPO
# --------------------------------------------------------------------------------------------
def tpo_target(logp_old, scores, eta=1.0, *, anchor: bool = True, std_floor: float = STD_FLOOR):
    r"""TPO's target distribution over the group (frozen: stop-gradient).

    .. math:: q = \mathrm{softmax}\big(\log\mathrm{softmax}(\ell_{old}) + u/\eta\big)
              = \arg\max_{r\in\Delta} \textstyle\sum_i r_i u_i - \eta\,\mathrm{KL}(r\,\|\,p_{old})

    ``anchor=False`` drops p_old (the *TPO-no-anchor* ablation: q = softmax(u/η)).
    ``std_floor`` is the σ threshold of :func:`standardize` (raise it to stop standardisation from
    amplifying tiny score differences; named variant, the paper uses 1e-6).
    """
    checks.positive_if_number("eta", eta)
    _check_group("scores", scores)
    _check_same_shape(logp_old=logp_old, scores=scores)
    u = standardize(scores, floor=std_floor)
    prior = jax.nn.log_softmax(jnp.asarray(logp_old, jnp.float32), axis=-1) if anchor else 0.0
    return jax.lax.stop_gradient(jax.nn.softmax(prior + u / eta, axis=-1))


def tpo_loss(logp, logp_old, scores, eta=1.0, *, anchor: bool = True, std_floor: float = STD_FLOOR):
    r"""Sequence-level TPO: cross-entropy from the frozen target q to the group softmax p.

    .. math:: L = -\sum_i q_i \log p_i,\qquad p = \mathrm{softmax}(\ell),\qquad
              \partial L/\partial \ell_i = p_i - q_i
    """
    _check_same_shape(logp=logp, logp_old=logp_old, scores=scores)
    q = tpo_target(logp_old, scores, eta, anchor=anchor, std_floor=std_floor)
    log_p = jax.nn.log_softmax(logp, axis=-1)
    return -(q * log_p).sum(-1).mean()


def tpo_token_loss(cand_logp, cand_logp_old, cand_rewards, eta=1.0):
    """:func:`tpo_loss` itself, on token-level inputs (dense rewards): the group is a state's K next-token
    candidates instead of a prompt's K completions, so the formula is the same and only the shapes differ.

    Shapes ``[..., H, K]``: the candidate axis is last; the loss is the mean over all B·H states.
    Candidates are drawn i.i.d. with replacement; duplicates are kept, exactly like the reference.
    """
    return tpo_loss(cand_logp, cand_logp_old, cand_rewards, eta)


def group_pg_loss(logp, scores, eta=1.0):
    r"""Group PG ablation: weight the log-probs by the standardised scores, no ratio, no clip.

    .. math:: L = -\sum_i (u_i/\eta) \log\pi(y_i)
    """
    checks.positive_if_number("eta", eta)
    _check_same_shape(logp=logp, scores=scores)
    u = standardize(scores)
    return -((u / eta) * logp).sum(-1).mean()


# --------------------------------------------------------------------------------------------
# GRPO family
# --------------------------------------------------------------------------------------------
def grpo_advantages(scores, *, ddof: int = 0):
    """GRPO's group advantage (s - mean) / (std + 1e-8); population std by default (paper)."""
    _check_group("scores", scores)
    c, sigma = _centred(scores, ddof)
    return c / (sigma + GRPO_EPS)


def k3_kl(logp, logp_ref):
    """Schulman's k3 estimator of KL(π_θ‖π_ref) at samples from the rollout: r - 1 - log r, r = π_ref/π_θ."""
    log_r = jnp.clip(logp_ref - logp, -20.0, 20.0)
    return jnp.exp(log_r) - 1.0 - log_r


def clipped_surrogate(log_ratio, adv, clip_eps=0.2, clip_eps_high=None):
    """min(ρA, clip(ρ, 1-ε_low, 1+ε_high)A) with ρ = exp(clip(log ratio, ±20))."""
    hi = clip_eps if clip_eps_high is None else clip_eps_high
    rho = jnp.exp(jnp.clip(log_ratio, -20.0, 20.0))
    return jnp.minimum(rho * adv, jnp.clip(rho, 1.0 - clip_eps, 1.0 + hi) * adv)


def grpo_loss(
    logp,
    logp_old,
    scores,
    *,
    beta=0.04,
    clip_eps=0.2,
    clip_eps_high=None,
    ddof: int = 0,
    mask_zero_var: bool = False,
    logp_ref=None,
):
    r"""GRPO exactly as the paper's code: sequence-level ratio, k3 KL to the rollout snapshot.

    .. math:: L = \operatorname{mean}_{prompts} -\sum_{i\le K}\big[\min(\rho_iA_i,
              \mathrm{clip}(\rho_i,1\pm\epsilon)A_i) - \beta\,k_3(\pi_{old}/\pi_\theta)\big]

    ``beta=0`` is *GRPO (no KL)*; ``mask_zero_var=True`` is *GRPO (masked)* (all-equal groups dropped,
    mean over informative groups); ``clip_eps_high`` gives DAPO's clip-higher; ``ddof=1`` the
    sample std of TRL/verl; ``logp_ref`` a frozen reference for the KL (default: the rollout snapshot).
    """
    checks.positive_if_number("clip_eps", clip_eps)
    _check_same_shape(logp=logp, logp_old=logp_old, scores=scores)
    adv = jax.lax.stop_gradient(grpo_advantages(scores, ddof=ddof))
    ref = logp_old if logp_ref is None else logp_ref
    per = clipped_surrogate(logp - logp_old, adv, clip_eps, clip_eps_high) - beta * k3_kl(logp, ref)
    per_group = -per.sum(-1)
    if not mask_zero_var:
        return per_group.mean()
    keep = (~zero_variance(scores)).astype(per_group.dtype)
    return (per_group * keep).sum() / jnp.maximum(keep.sum(), 1.0)


def grpo_token_ratio_loss(
    token_logp,
    token_logp_old,
    scores,
    mask=None,
    *,
    beta=0.04,
    clip_eps=0.2,
    clip_eps_high=None,
    ddof: int = 1,
    aggregation: str = "sequence",
    token_logp_ref=None,
):
    r"""GRPO with **per-token** ratios (the TRL/verl flavour), and DAPO's token-level aggregation.

    Shapes: ``token_logp`` ``[..., K, T]``, ``scores`` ``[..., K]``, ``mask`` ``[..., K, T]``.
    ``aggregation="sequence"``: mean over each completion's tokens, then mean over completions
    (GRPO/TRL); ``"token"``: one mean over every token of the batch (DAPO).
    """
    if aggregation not in ("sequence", "token"):
        raise ValueError(f"aggregation must be 'sequence' or 'token', got {aggregation!r}")
    _check_same_shape(token_logp=token_logp, token_logp_old=token_logp_old, mask=mask)
    if jnp.shape(token_logp)[:-1] != jnp.shape(scores):
        raise ValueError(f"shapes disagree: token_logp{jnp.shape(token_logp)} vs scores{jnp.shape(scores)}")
    mask = jnp.ones_like(token_logp) if mask is None else mask.astype(token_logp.dtype)
    adv = jax.lax.stop_gradient(grpo_advantages(scores, ddof=ddof))[..., None]
    ref = token_logp_old if token_logp_ref is None else token_logp_ref
    per = clipped_surrogate(token_logp - token_logp_old, adv, clip_eps, clip_eps_high)
    per = per - beta * k3_kl(token_logp, ref)
    if aggregation == "token":
        return -(per * mask).sum() / jnp.maximum(mask.sum(), 1.0)
    per_seq = (per * mask).sum(-1) / jnp.maximum(mask.sum(-1), 1.0)
    return -per_seq.mean()


def dapo_loss(token_logp, token_logp_old, scores, mask=None, *, clip_eps=0.2, clip_eps_high=0.28):
    """DAPO: clip-higher (0.2/0.28), token-level aggregation, no KL, zero-variance groups dropped.

    Dynamic sampling here *drops* the all-equal groups (a fixed-batch version of DAPO's refill).
    """
    keep = (~zero_variance(scores)).astype(jnp.float32)[..., None, None]
    mask = jnp.ones_like(token_logp) if mask is None else mask
    return grpo_token_ratio_loss(
        token_logp,
        token_logp_old,
        scores,
        mask * keep,
        beta=0.0,
        clip_eps=clip_eps,
        clip_eps_high=clip_eps_high,
        ddof=0,
        aggregation="token",
    )


# --------------------------------------------------------------------------------------------
# single-sample policy gradients (advantages given per token, shapes [..., T])
# --------------------------------------------------------------------------------------------
def batch_baseline_advantages(rewards):
    """A_t = r_t - per-position batch mean (the reference's critic-free baseline). rewards [B, T]."""
    rewards = jnp.asarray(rewards, jnp.float32)
    return rewards - rewards.mean(0, keepdims=True)


def pg_loss(token_logp, adv):
    r"""REINFORCE: L = -Σ_t A_t log π(a_t), mean over the batch."""
    return -(jax.lax.stop_gradient(adv) * token_logp).sum(-1).mean()


def ppo_loss(token_logp, token_logp_old, adv, *, clip_eps=0.2):
    """PPO without a critic: per-token clipped surrogate, summed over tokens, mean over the batch."""
    checks.positive_if_number("clip_eps", clip_eps)
    adv = jax.lax.stop_gradient(adv)
    return -clipped_surrogate(token_logp - token_logp_old, adv, clip_eps).sum(-1).mean()


def dg_weights(token_logp, adv, eta=1.0):
    """Delightful PG gate: w = sigmoid(A · (-log π(a)) / η)."""
    checks.positive_if_number("eta", eta)
    return jax.nn.sigmoid(adv * (-token_logp) / eta)


def dg_loss(token_logp, adv, eta=1.0):
    r"""Delightful Policy Gradient (Osband 2026): L = -Σ_t sg(w_t A_t) log π(a_t)."""
    w = jax.lax.stop_gradient(dg_weights(token_logp, adv, eta) * adv)
    return -(w * token_logp).sum(-1).mean()


# --------------------------------------------------------------------------------------------
# other group methods of the comparison table
# --------------------------------------------------------------------------------------------
def rloo_advantages(scores):
    """Leave-one-out baseline: A_i = s_i - mean of the others = K/(K-1) · (s_i - mean s)."""
    _check_group("scores", scores)
    scores = jnp.asarray(scores, jnp.float32)
    k = scores.shape[-1]
    return k / (k - 1) * (scores - scores.mean(-1, keepdims=True))


def rloo_loss(logp, scores):
    r"""RLOO: L = -Σ_i A_i log π(y_i), mean over prompts."""
    _check_same_shape(logp=logp, scores=scores)
    return -(jax.lax.stop_gradient(rloo_advantages(scores)) * logp).sum(-1).mean()


def rebel_loss(logp, logp_old, scores, eta=1.0):
    r"""REBEL (Gao et al. 2024) over all ordered pairs i<j of the group.

    .. math:: \big(\tfrac1\eta[(\ell_i-\ell^{old}_i)-(\ell_j-\ell^{old}_j)] - (s_i-s_j)\big)^2
    """
    checks.positive_if_number("eta", eta)
    _check_group("scores", scores)
    _check_same_shape(logp=logp, logp_old=logp_old, scores=scores)
    k = jnp.shape(scores)[-1]
    d = (logp - logp_old) / eta
    pred = d[..., :, None] - d[..., None, :]
    target = scores[..., :, None] - scores[..., None, :]
    upper = jnp.triu(jnp.ones((k, k)), 1)
    return (((pred - target) ** 2) * upper).sum((-1, -2)).mean() / (k * (k - 1) / 2)


def vmpo_loss(logp, logp_old, scores, log_temperature, log_alpha, *, eps_eta=0.1, eps_alpha=0.01):
    r"""V-MPO (Song et al. 2020) in group form, without a critic.

    A = s - group mean; keep the top half of the whole batch by A;
    ψ = softmax over the kept samples of A/η; policy loss -Σ ψ log π;
    temperature loss η ε_η + η log mean_top exp(A/η) (η = exp(log_temperature), learned);
    trust region α(ε_α - sg KL) + sg(α) KL with α = exp(log_alpha), KL = k3 to π_old.
    Returns the sum of the three losses (minimise over θ, η and α jointly).
    """
    _check_same_shape(logp=logp, logp_old=logp_old, scores=scores)
    scores = jnp.asarray(scores, jnp.float32)
    adv = (scores - scores.mean(-1, keepdims=True)).reshape(-1)
    lp = logp.reshape(-1)
    n = adv.shape[0]
    top = jnp.argsort(-adv)[: max(n // 2, 1)]
    a_top, lp_top = adv[top], lp[top]
    eta = jnp.exp(log_temperature) + 1e-6
    psi = jax.lax.stop_gradient(jax.nn.softmax(a_top / jax.lax.stop_gradient(eta)))
    policy = -(psi * lp_top).sum()
    temperature = eta * eps_eta + eta * (jax.nn.logsumexp(jax.lax.stop_gradient(a_top) / eta) - jnp.log(a_top.shape[0]))
    alpha = jnp.exp(log_alpha)
    kl = k3_kl(logp, logp_old).mean()
    trust = alpha * (eps_alpha - jax.lax.stop_gradient(kl)) + jax.lax.stop_gradient(alpha) * kl
    return policy + temperature + trust


def bandit_scores(actions, adv, num_classes: int):
    """The MNIST bandit's raw scores over the ``num_classes`` actions of each image, from its one sampled action:
    ``sign(A)`` on the sampled class, 0 on the others (actions [N], adv [N] -> [N, C]). Standardised they are
    u_a = sign(A)·sqrt(C-1) and u_j = -sign(A)/sqrt(C-1), so TPO's bandit target is
    ``tpo_target(logits, bandit_scores(actions, adv, C), eta)``."""
    return jnp.sign(adv)[:, None] * jax.nn.one_hot(actions, num_classes)


def cross_entropy_loss(logits, labels):
    """Supervised cross-entropy -log π(y) with the true label: the MNIST bandit's supervised reference.

    Not an upper bound on what a bandit method reaches: it sees every label, but on a small training set it
    overfits (the committed 8k/2k MNIST runs end with CE above TPO)."""
    logp = jax.nn.log_softmax(logits, -1)
    return -jnp.take_along_axis(logp, labels[..., None], -1).mean()
