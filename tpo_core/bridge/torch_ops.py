"""TPO's group math in pure PyTorch, for LLM trainers (TRL, verl): a mirror of :mod:`tpo_core.losses`.

Target Policy Optimization (Kaddour 2026, arXiv 2604.06159, §2; reference code
github.com/JeanKaddour/tpo, ``src/tpo/algorithms.py``) in the conventions of ``tpo_core.losses``:

* the **group** (the K completions of one prompt) is the **last** axis; leading axes are groups;
* ``logp`` is the sequence score under the policy being trained, ``logp_old`` under the frozen
  rollout policy. :func:`sequence_logp` makes it from token log-probs in one of two named ways:
  ``"sum"`` (the paper's ℓ, §2/§3.4: the exact log-probability) or ``"mean"`` (length-normalised, the
  default of the paper author's TargetPO trainer proposed to TRL and of our bridges; evidence in
  :mod:`tpo_core.bridge.trl`). The functions below take whichever score they are given;
* ``scores`` are raw rewards; TPO standardises them inside the group.

This module imports only ``torch`` (no JAX, no trainer). Everything is autograd friendly; the
target ``q`` is always detached. Bad arguments raise ``ValueError`` naming the parameter.

The identity the trainers rely on (checked in ``tests/test_bridge_lm.py``): with N rows in G groups
of K = N/G, at θ = θ_old

.. math::
   \\nabla_\\theta \\tfrac1G \\sum_g -\\sum_{i\\in g} q_i \\log p_i(\\theta)
   = \\nabla_\\theta \\Big(-\\tfrac1N \\sum_{i=1}^N w_i\\,\\ell_i(\\theta)\\Big),
   \\qquad w_i = \\tfrac NG\\,(q_i - p^{old}_i) = K\\,(q_i - p^{old}_i),

with ``ℓ_i`` the sequence score of row i. For ``"sum"`` this is a policy gradient with
per-sequence advantage ``w`` and "sequence-mean, token-sum" aggregation (verl's
``seq-mean-token-sum`` divided by the number of *sequences* N); for ``"mean"`` each row's token
terms carry an extra 1/T_i (T_i its unmasked length), i.e. advantage ``w_i / T_i`` per token. Because it is a sum of per-row terms it holds under any row order,
micro-batch split or data-parallel sharding of the rows. It holds only at θ_old: for later epochs
(or later mini-batches of one rollout) the gradient needs the *current* group softmax p(θ), hence
whole groups in one loss (:func:`tpo_loss`).
"""

from __future__ import annotations

from typing import Hashable, Sequence

import torch
from torch import Tensor

from tpo_core import checks
from tpo_core.constants import STD_FLOOR  # the engine's σ threshold (a module with no imports: no JAX here)

__all__ = [
    "STD_FLOOR",
    "standardize",
    "tpo_target",
    "tpo_loss",
    "sequence_logp",
    "group_index",
    "gather_groups",
    "tpo_sequence_weights",
    "tpo_diagnostics",
    "within_group_spread",
    "check_eta",
]


# --------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------
def check_eta(eta) -> float:
    """η must be a finite real number > 0 (the configs' rule, :func:`tpo_core.checks.positive`); returns it as a
    float. A one-element tensor is read as its number."""
    if isinstance(eta, torch.Tensor) and eta.numel() == 1:
        eta = eta.item()
    return checks.positive("eta", eta)


def _check_group(name: str, x: torch.Tensor) -> None:
    if x.ndim < 1 or x.shape[-1] < 2:
        raise ValueError(f"{name} needs a group axis (last) of size K >= 2, got shape {tuple(x.shape)}")


def _check_same_shape(**arrays) -> None:
    shapes = {n: tuple(a.shape) for n, a in arrays.items() if a is not None}
    if len(set(shapes.values())) > 1:
        described = ", ".join(f"{n}{s}" for n, s in shapes.items())
        raise ValueError(f"shapes disagree (K mismatch?): {described}")


def _check_finite(name: str, x: torch.Tensor, valid: torch.Tensor | None = None) -> None:
    bad = ~torch.isfinite(x)
    if valid is not None:
        bad = bad & valid
    if bool(bad.any()):
        raise ValueError(f"{name} contains NaN or inf at {int(bad.sum())} valid position(s)")


def _as_tensor(x, like: torch.Tensor | None = None) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    dtype = like.dtype if like is not None else torch.get_default_dtype()
    device = like.device if like is not None else None
    return torch.as_tensor(x, dtype=dtype, device=device)


def _valid_mask(valid, like: torch.Tensor) -> torch.Tensor:
    if valid is None:
        return torch.ones(like.shape, dtype=torch.bool, device=like.device)
    valid = torch.as_tensor(valid, device=like.device).bool()
    if tuple(valid.shape) != tuple(like.shape):
        raise ValueError(
            f"valid must have the shape of the group tensors {tuple(like.shape)}, got {tuple(valid.shape)}"
        )
    return valid


# --------------------------------------------------------------------------------------------
# the group math
# --------------------------------------------------------------------------------------------
def standardize(scores: torch.Tensor, valid: torch.Tensor | None = None, *, floor: float = STD_FLOOR) -> torch.Tensor:
    r"""Group z-score with the paper's zero-variance rule (population std, ddof = 0).

    .. math:: c = s - \bar s,\qquad \sigma = \sqrt{\tfrac1K \textstyle\sum_i c_i^2},\qquad
              u = c/\sigma \text{ if } \sigma > 10^{-6} \text{ else } u = c

    An all-equal group gives ``u = 0`` exactly. With ``valid`` (bool, shape of ``scores``) the mean
    and σ run over the valid members only and invalid members get ``u = 0``.
    """
    scores = _as_tensor(scores)
    _check_group("scores", scores)
    valid = _valid_mask(valid, scores)
    _check_finite("scores", scores, valid)
    if not scores.is_floating_point():
        scores = scores.to(torch.get_default_dtype())
    w = valid.to(scores.dtype)
    s = torch.where(valid, scores, torch.zeros_like(scores))
    n = w.sum(-1, keepdim=True).clamp_min(1.0)
    c = (s - s.sum(-1, keepdim=True) / n) * w
    sigma = torch.sqrt((c * c).sum(-1, keepdim=True) / n)
    safe = sigma > floor
    return torch.where(safe, c / torch.where(safe, sigma, torch.ones_like(sigma)), c)


def _masked_log_softmax(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    # invalid members get the most negative finite number: exp(.) == 0, no NaN, no gradient
    lowest = torch.finfo(x.dtype).min
    return torch.log_softmax(torch.where(valid, x, torch.full_like(x, lowest)), dim=-1)


def tpo_target(
    logp_old: Tensor, scores: Tensor, eta: float = 1.0, valid: Tensor | None = None, *, std_floor: float = STD_FLOOR
) -> Tensor:
    r"""TPO's target distribution over the group (detached).

    .. math:: q = \mathrm{softmax}\big(\log\mathrm{softmax}(\ell_{old}) + u/\eta\big)
              \;\propto\; p_{old}\,e^{u/\eta}
              = \arg\max_{r\in\Delta}\ \textstyle\sum_i r_i u_i - \eta\,\mathrm{KL}(r\,\|\,p_{old})

    ``valid`` excludes members from the group (``q = 0`` there).
    """
    eta = check_eta(eta)
    logp_old = _as_tensor(logp_old)
    scores = _as_tensor(scores, logp_old)
    _check_group("logp_old", logp_old)
    _check_same_shape(logp_old=logp_old, scores=scores)
    valid = _valid_mask(valid, logp_old)
    _check_finite("logp_old", logp_old, valid)
    logp_old = logp_old.detach()
    u = standardize(scores.to(logp_old.dtype), valid, floor=std_floor)
    logits = _masked_log_softmax(logp_old, valid) + u / eta
    q = torch.softmax(torch.where(valid, logits, torch.full_like(logits, torch.finfo(logits.dtype).min)), -1)
    return torch.where(valid, q, torch.zeros_like(q)).detach()


def tpo_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    scores: torch.Tensor,
    eta: float = 1.0,
    valid: torch.Tensor | None = None,
    *,
    reduction: str = "mean",
    std_floor: float = STD_FLOOR,
) -> torch.Tensor:
    r"""Sequence-level TPO: cross-entropy from the frozen target q to the group softmax p(θ).

    .. math:: L = \frac1G\sum_{g}\Big(-\sum_{i\in g} q_i \log p_i\Big),\qquad
              p = \mathrm{softmax}(\ell),\qquad \frac{\partial L}{\partial \ell_i} = \frac{p_i - q_i}{G}

    Shapes ``[..., K]``; G is the number of groups (all leading axes) that have at least one valid
    member. ``reduction="sum"`` returns the sum over groups instead (for accumulating over
    micro-batches of whole groups: divide by the global number of groups yourself).
    ``valid`` (bool) masks padded members of ragged groups out of the softmax, the standardisation
    and the loss; a group with one valid member contributes 0.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    logp = _as_tensor(logp)
    logp_old = _as_tensor(logp_old, logp)
    scores = _as_tensor(scores, logp)
    _check_same_shape(logp=logp, logp_old=logp_old, scores=scores)
    valid = _valid_mask(valid, logp)
    q = tpo_target(logp_old, scores, eta, valid, std_floor=std_floor).to(logp.dtype)
    log_p = _masked_log_softmax(logp, valid)
    per_group = -torch.where(valid, q * log_p, torch.zeros_like(log_p)).sum(-1)
    if reduction == "sum":
        return per_group.sum()
    has_member = valid.any(-1).to(per_group.dtype)
    return per_group.sum() / has_member.sum().clamp_min(1.0)


# --------------------------------------------------------------------------------------------
# from rows of a trainer batch to groups
# --------------------------------------------------------------------------------------------
def sequence_logp(token_logp: torch.Tensor, mask: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
    r"""Sequence log-prob from per-token log-probs ``[..., T]`` and a completion mask ``[..., T]``.

    ``reduce="sum"`` (the paper's ℓ, arXiv 2604.06159 §2): :math:`\ell = \sum_t m_t \log\pi(y_t|x, y_{<t})`,
    the exact log-probability of the completion; its group softmax carries a length prior, and on a real LM
    it is near one-hot within a group (``results/llm_spread``). ``reduce="mean"``:
    :math:`\sum_t m_t\log\pi / \max(1,\sum_t m_t)`, a length-normalised score that is *not* a
    log-probability; the default of the bridges (``tpo_core.bridge.trl.SEQUENCE_SCORES``) and of the
    paper author's TargetPO trainer. This function's own default stays ``"sum"``, the literal definition.
    """
    if reduce not in ("sum", "mean"):
        raise ValueError(f"reduce must be 'sum' or 'mean', got {reduce!r}")
    mask = torch.as_tensor(mask, device=token_logp.device)
    if tuple(mask.shape) != tuple(token_logp.shape):
        raise ValueError(f"mask must have the shape of token_logp {tuple(token_logp.shape)}, got {tuple(mask.shape)}")
    m = mask.to(token_logp.dtype)
    total = (token_logp * m).sum(-1)
    if reduce == "sum":
        return total
    return total / m.sum(-1).clamp_min(1.0)


def _uid_key(u) -> Hashable:
    if isinstance(u, torch.Tensor):
        return u.item()
    if hasattr(u, "item") and not isinstance(u, (str, bytes)):
        try:
            return u.item()
        except (ValueError, AttributeError):
            pass
    return u


def group_index(
    uids: Sequence[Hashable], group_size: int | None = None, *, contiguous: bool = False, device=None
) -> torch.Tensor:
    """Row ids of each group, ``[G, K]``, groups in order of first appearance.

    ``uids[i]`` is the prompt id of row i (verl's ``non_tensor_batch["uid"]``; TRL's prompt index).
    Raises ``ValueError`` naming ``uids`` when the groups are ragged (not all of one size K) and
    ``group_size`` when K differs from it. With ``contiguous=True`` (a micro-batch that must hold
    whole groups back to back, e.g. verl's Route B) it also raises when a group's rows are not one
    contiguous block in order ``[g0 × K, g1 × K, ...]``.
    """
    keys = [_uid_key(u) for u in uids]
    if len(keys) == 0:
        raise ValueError("uids is empty")
    rows: dict[Hashable, list[int]] = {}
    for i, k in enumerate(keys):
        rows.setdefault(k, []).append(i)
    sizes = {len(r) for r in rows.values()}
    if len(sizes) != 1:
        counts = sorted(sizes)
        raise ValueError(
            f"uids: ragged groups (group sizes {counts}); TPO needs whole groups of one size K "
            "(a group split across batches or an incomplete group?)"
        )
    k = sizes.pop()
    if group_size is not None and k != group_size:
        raise ValueError(f"group_size={group_size} but uids form groups of K={k}")
    if k < 2:
        raise ValueError("uids: every group has one member; TPO needs K >= 2 completions per prompt")
    if contiguous:
        for g, r in enumerate(rows.values()):
            if r != list(range(g * k, (g + 1) * k)):
                raise ValueError(
                    f"uids: group {g} occupies rows {r}, not the contiguous block "
                    f"{g * k}..{(g + 1) * k - 1} (rows shuffled or a group split?)"
                )
    return torch.tensor(list(rows.values()), dtype=torch.long, device=device)


def _as_index(index, n: int, device) -> torch.Tensor:
    if isinstance(index, torch.Tensor) and index.ndim == 2:
        index = index.to(device=device, dtype=torch.long)
    else:
        index = group_index(index, device=device)
    if index.numel() != n or not torch.equal(
        torch.sort(index.reshape(-1)).values, torch.arange(n, device=index.device)
    ):
        raise ValueError(f"index must cover each of the {n} rows exactly once, got shape {tuple(index.shape)}")
    return index


def gather_groups(x: torch.Tensor, index) -> torch.Tensor:
    """Rows ``[N]`` to groups ``[G, K]`` by a :func:`group_index` (or by a list of uids)."""
    return x[_as_index(index, x.shape[0], x.device)]


def tpo_sequence_weights(
    seq_logp_old: torch.Tensor,
    scores: torch.Tensor,
    index,
    eta: float = 1.0,
    valid: torch.Tensor | None = None,
    *,
    std_floor: float = STD_FLOOR,
) -> torch.Tensor:
    r"""Per-row policy-gradient coefficient that reproduces TPO's gradient at θ = θ_old.

    .. math:: w_i = \frac{N}{G}\,(q_i - p^{old}_i) = K\,(q_i - p^{old}_i),\qquad
              -\frac1N\sum_i w_i\,\nabla\ell_i = \frac1G\sum_i (p^{old}_i - q_i)\nabla\ell_i
              = \nabla L_{TPO}\big|_{\theta_{old}}

    ``seq_logp_old`` and ``scores`` are rows ``[N]`` in any order; ``index`` is a :func:`group_index`
    ``[G, K]`` or the rows' uids. Returns ``[N]`` (detached), aligned with the input rows; use it as
    the advantage of every token of row i with a token-**sum** per sequence and a mean over the N
    sequences. Each group's weights sum to 0. ``valid`` (bool rows ``[N]``) leaves rows out of their
    group's softmax and target (weight 0), e.g. completions whose loss mask is all zero.
    """
    eta = check_eta(eta)
    seq_logp_old = _as_tensor(seq_logp_old).detach()
    scores = _as_tensor(scores, seq_logp_old)
    if seq_logp_old.ndim != 1:
        raise ValueError(f"seq_logp_old must be one value per row [N], got shape {tuple(seq_logp_old.shape)}")
    _check_same_shape(seq_logp_old=seq_logp_old, scores=scores)
    index = _as_index(index, seq_logp_old.shape[0], seq_logp_old.device)
    g, k = index.shape
    lo, s = seq_logp_old[index], scores.to(seq_logp_old.dtype)[index]
    if valid is not None:
        valid = torch.as_tensor(valid, device=seq_logp_old.device).bool()
        _check_same_shape(seq_logp_old=seq_logp_old, valid=valid)
        valid = valid[index]
    valid = _valid_mask(valid, lo)
    q = tpo_target(lo, s, eta, valid, std_floor=std_floor)
    p_old = torch.where(valid, _masked_log_softmax(lo, valid).exp(), torch.zeros_like(lo))
    w = torch.empty_like(seq_logp_old)
    w[index.reshape(-1)] = ((seq_logp_old.shape[0] / g) * (q - p_old)).reshape(-1)
    return w


def within_group_spread(x: torch.Tensor, valid: torch.Tensor | None = None) -> tuple[float, float]:
    """Mean over groups ``[G, K]`` of the within-group population std and of the range (max − min) of ``x``
    over the valid members (e.g. the old policy's sequence log-probs: a spread ≫ 1 nat puts p_old on a few
    completions). Groups with no valid member are left out; ``(nan, nan)`` if none has one."""
    x = _as_tensor(x).detach().double()
    valid = _valid_mask(valid, x)
    w = valid.double()
    n = w.sum(-1)
    has = n > 0
    if not bool(has.any()):
        return float("nan"), float("nan")
    mean = (x * w).sum(-1) / n.clamp_min(1.0)
    std = torch.sqrt((((x - mean[..., None]) * w) ** 2).sum(-1) / n.clamp_min(1.0))
    inf = torch.full_like(x, float("inf"))
    spread = torch.where(valid, x, -inf).amax(-1) - torch.where(valid, x, inf).amin(-1)
    return float(std[has].mean()), float(spread[has].mean())


def tpo_diagnostics(
    logp_old: Tensor, scores: Tensor, eta: float = 1.0, valid: Tensor | None = None, *, std_floor: float = STD_FLOOR
) -> dict[str, float]:
    r"""What to log per batch of groups ``[G, K]`` (means over groups).

    * ``entropy_p_old``, ``entropy_q``: :math:`-\sum_i p_i \log p_i` of the group softmax and the target;
    * ``tv``: total variation :math:`\tfrac12\sum_i |q_i - p^{old}_i|` (how far the target moves);
    * ``kl_q_p_old``: :math:`\mathrm{KL}(q\|p_{old})`;
    * ``zero_variance_frac``: fraction of groups with σ ≤ 1e-6 (no signal: q = p_old);
    * ``argmax_moved_frac``: fraction of groups whose most likely member differs between q and p_old.
    """
    logp_old = _as_tensor(logp_old).detach()
    scores = _as_tensor(scores, logp_old)
    valid = _valid_mask(valid, logp_old)
    q = tpo_target(logp_old, scores, eta, valid, std_floor=std_floor)
    log_p_old = _masked_log_softmax(logp_old, valid)
    p_old = torch.where(valid, log_p_old.exp(), torch.zeros_like(log_p_old))
    zero = torch.zeros_like(q)
    log_q = torch.where(q > 0, torch.log(torch.where(q > 0, q, torch.ones_like(q))), zero)
    ent_p = -torch.where(valid, p_old * log_p_old, zero).sum(-1)
    ent_q = -(q * log_q).sum(-1)
    kl = torch.where(q > 0, q * (log_q - log_p_old), zero).sum(-1)
    tv = 0.5 * (q - p_old).abs().sum(-1)
    w = valid.to(logp_old.dtype)
    s = torch.where(valid, scores.to(logp_old.dtype), zero)
    n = w.sum(-1).clamp_min(1.0)
    c = (s - s.sum(-1, keepdim=True) / n[..., None]) * w
    sigma = torch.sqrt((c * c).sum(-1) / n)
    moved = q.argmax(-1) != p_old.argmax(-1)
    mean = lambda x: float(x.float().mean())  # noqa: E731
    return {
        "entropy_p_old": mean(ent_p),
        "entropy_q": mean(ent_q),
        "tv": mean(tv),
        "kl_q_p_old": mean(kl),
        "zero_variance_frac": mean(sigma <= std_floor),
        "argmax_moved_frac": mean(moved),
    }
