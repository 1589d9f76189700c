"""One registry of methods, so the book, the demo and the CLI all name them the same way.

Each :class:`Method` says how it samples and what it minimises, on the token tasks and (where it
exists) on the MNIST bandit. The loss adapters only unpack a batch and call :mod:`tpo_core.losses`.

Sampling kinds on the token tasks:

* ``group``  — K full completions per prompt; batch: ``logp``/``logp_old``/``scores`` [B, K],
  ``token_logp``/``token_logp_old`` [B, K, H];
* ``single`` — one completion per prompt; batch: ``token_logp``/``token_logp_old``/``rewards`` [B, H];
* ``token``  — one behaviour trajectory, K next-token candidates per state (dense rewards only);
  batch: ``logp``/``logp_old``/``scores`` [B, H, K];
* ``bandit`` — no token-task loss: a method of the MNIST bandit only (the supervised reference ``ce``).

Each loss reads its hyperparameters from ``knobs``, the run's traced scalars (:data:`tpo_core.config.TOKEN_KNOBS`:
eta, lr, beta, clip_eps, std_floor, reward_noise; :data:`~tpo_core.config.BANDIT_KNOBS` on the bandit).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Callable, Optional

import jax
import jax.numpy as jnp

from . import losses as L


@dataclasses.dataclass(frozen=True, kw_only=True)
class Method:
    name: str
    title: str
    sampling: str  # "group" | "single" | "token" (the token tasks, above) | "bandit" (bandit only)
    epochs: int  # default number of update epochs per batch
    loss: Optional[Callable]  # (batch, knobs) -> scalar, on the token tasks (None: bandit only)
    summary: str
    variant: str = "paper"  # "paper", "ablation", "TRL/verl", "DAPO", "beyond the paper"
    bandit: Optional[Callable] = None  # (logits, actions, labels, adv, knobs) -> scalar
    learned: tuple = ()  # names of extra scalar parameters learned with the policy (V-MPO)
    oversample: float = 1.0  # refill variants: groups drawn per episode = round(B·oversample) (see tpo_refill)
    refill: bool = False  # keep the first B informative groups of the draw; mask the rest (batch["keep"])

    @property
    def dense_only(self) -> bool:
        return self.sampling == "token"

    @property
    def groups(self) -> bool:
        """The method trains on groups of K completions of one prompt."""
        return self.sampling == "group"

    @property
    def single_sample(self) -> bool:
        """The method trains on one completion per prompt (an interaction-matched comparison gives it B·K
        prompts)."""
        return self.sampling == "single"

    def groups_drawn(self, B: int) -> int:
        """Prompts (groups) sampled per episode for a batch of B: B, or round(B·oversample) for a refill variant.
        Rollouts per episode are this times K, the count an interaction-matched comparison uses."""
        return max(B, int(round(B * self.oversample)))


def _adv(batch):
    return L.batch_baseline_advantages(batch["rewards"])


# ---- bandit adapters: logits [N, C], actions [N], labels [N], adv = r - Σπ² [N] ------------------
def _picked(logits, actions):
    return jnp.take_along_axis(jax.nn.log_softmax(logits), actions[:, None], -1)[:, 0]


def _bandit_tpo(logits, actions, labels, adv, knobs):
    """TPO on the bandit: the group is the C classes of an image, p_old = π (the current logits, frozen inside
    the target), scores :func:`tpo_core.losses.bandit_scores`: :func:`tpo_core.losses.tpo_loss` itself."""
    return L.tpo_loss(logits, logits, L.bandit_scores(actions, adv, logits.shape[-1]), knobs["eta"])


def _bandit_group_pg(logits, actions, labels, adv, knobs):
    u = L.standardize(L.bandit_scores(actions, adv, logits.shape[-1]))  # u_a = 3 sign(A), u_j = -sign(A)/3 (C=10)
    return -(jnp.take_along_axis(u, actions[:, None], -1)[:, 0] * _picked(logits, actions)).mean()


def _bandit_grpo(logits, actions, labels, adv, knobs):
    r = (actions == labels).astype(jnp.float32)
    z = (r - r.mean()) / (r.std() + L.GRPO_EPS)
    return L.pg_loss(_picked(logits, actions)[:, None], z[:, None])


# ---- dynamic-sampling refill (DAPO's trick, on a static shape) -------------------------------------
def refill_select(scores, B: int):
    """Indices of the ``B`` groups a refill variant trains on, and which of them are informative.

    ``scores`` [N, K] are the N >= B groups drawn this episode. Informative groups (scores not all equal,
    :func:`tpo_core.losses.zero_variance`) come first, in draw order (a stable sort), then the rest; the first
    B are kept. ``keep`` [B] is False for the filler taken when fewer than B of the N are informative (the
    loss masks it), so ``keep.mean()`` is the fill fraction. DAPO itself keeps sampling until the batch is
    full; with a fixed oversampling factor the batch is filled from what was drawn and the shortfall logged.
    """
    informative = ~L.zero_variance(scores)  # [N]
    order = jnp.argsort((~informative).astype(jnp.int32), stable=True)  # informative first, draw order kept
    idx = order[:B]
    return idx, informative[idx]


def _tpo_refill_loss(b, knobs):
    """TPO's cross-entropy to q, averaged over the kept (informative) groups only; 0 when none is kept."""
    q = L.tpo_target(b["logp_old"], b["scores"], knobs["eta"], std_floor=knobs["std_floor"])
    ce = -(q * jax.nn.log_softmax(b["logp"], axis=-1)).sum(-1)  # [B]
    keep = b["keep"].astype(jnp.float32)
    return (ce * keep).sum() / jnp.maximum(keep.sum(), 1.0)


def tpo_refill(oversample: float = 2.0, name: str | None = None) -> Method:
    """TPO + dynamic-sampling refill: draw round(B·oversample) prompts' groups of K, train on the first B
    informative ones (TPO's loss over exactly those). ``oversample`` r >= 1 is static (it sets the rollout
    shape); register the returned method to use another r, e.g. ``register(tpo_refill(4))`` gives
    ``"tpo_refill_x4"``. Each episode costs r·B·K rollouts against TPO's B·K."""
    if not (isinstance(oversample, (int, float)) and oversample >= 1):
        raise ValueError(f"oversample must be a number >= 1, got {oversample!r}")
    return Method(
        name=name or f"tpo_refill_x{oversample:g}",
        title=f"TPO + refill (×{oversample:g})",
        sampling="group",
        epochs=4,
        loss=_tpo_refill_loss,
        summary=f"TPO on the first B informative groups of {oversample:g}·B drawn (DAPO's dynamic sampling, fixed "
        "oversampling; zero-variance filler masked when fewer are informative).",
        variant="beyond the paper",
        oversample=float(oversample),
        refill=True,
    )


def _grpo_loss(b, k):
    """GRPO's clipped sequence-ratio loss with its k3 KL; on sequences and on the per-state token candidates alike."""
    return L.grpo_loss(b["logp"], b["logp_old"], b["scores"], beta=k["beta"], clip_eps=k["clip_eps"])


REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    REGISTRY[method.name] = method
    return method


def method(name: str, title: str, sampling: str, epochs: int, **fields) -> Callable:
    """Register the decorated token-task loss ``(batch, knobs) -> scalar`` as the method ``name`` (its
    :class:`Method` fields beside the loss; the summary is the loss's docstring unless ``summary`` is given)."""

    def add(loss: Callable) -> Callable:
        fields.setdefault("summary", inspect.getdoc(loss))
        register(Method(name=name, title=title, sampling=sampling, epochs=epochs, loss=loss, **fields))
        return loss

    return add


@method("tpo", "TPO", "group", 4, bandit=_bandit_tpo)
def _tpo(b, k):
    """Cross-entropy to q ∝ p_old·exp(u/η) over the K completions of each prompt."""
    return L.tpo_loss(b["logp"], b["logp_old"], b["scores"], k["eta"], std_floor=k["std_floor"])


@method("tpo_no_anchor", "TPO (no anchor)", "group", 4, variant="ablation")
def _tpo_no_anchor(b, k):
    """Ablation: q = softmax(u/η), forgetting p_old."""
    return L.tpo_loss(b["logp"], b["logp_old"], b["scores"], k["eta"], anchor=False)


@method("group_pg", "Group PG", "group", 4, variant="ablation", bandit=_bandit_group_pg)
def _group_pg(b, k):
    """Ablation: -Σ (u_i/η) log π(y_i), no target, no ratio."""
    return L.group_pg_loss(b["logp"], b["scores"], k["eta"])


method(
    "grpo",
    "GRPO",
    "group",
    4,
    summary="Paper semantics: population std, sequence-level ratio, k3 KL to the rollout, β 0.04, clip 0.2.",
    bandit=_bandit_grpo,
)(_grpo_loss)


@method("grpo_no_kl", "GRPO (no KL)", "group", 4)
def _grpo_no_kl(b, k):
    """GRPO with β = 0."""
    return L.grpo_loss(b["logp"], b["logp_old"], b["scores"], beta=0.0, clip_eps=k["clip_eps"])


@method("grpo_masked", "GRPO (masked)", "group", 4)
def _grpo_masked(b, k):
    """GRPO with zero-variance groups dropped (mean over informative groups)."""
    return L.grpo_loss(
        b["logp"], b["logp_old"], b["scores"], beta=k["beta"], clip_eps=k["clip_eps"], mask_zero_var=True
    )


@method("grpo_trl", "GRPO (TRL/verl)", "group", 4, variant="TRL/verl")
def _grpo_trl(b, k):
    """TRL/verl flavour: sample std, per-token ratio and KL, mean over tokens then completions."""
    return L.grpo_token_ratio_loss(
        b["token_logp"], b["token_logp_old"], b["scores"], beta=k["beta"], clip_eps=k["clip_eps"], ddof=1
    )


@method("dapo", "DAPO", "group", 4, variant="DAPO")
def _dapo(b, k):
    """Clip-higher (0.2/0.28), token-level aggregation, no KL, all-equal groups dropped."""
    return L.dapo_loss(b["token_logp"], b["token_logp_old"], b["scores"], clip_eps=k["clip_eps"])


@method("rloo", "RLOO", "group", 1, variant="beyond the paper")
def _rloo(b, k):
    """REINFORCE with a leave-one-out baseline over the group."""
    return L.rloo_loss(b["logp"], b["scores"])


@method("rebel", "REBEL", "group", 4, variant="beyond the paper")
def _rebel(b, k):
    """Regress log-ratio differences onto reward differences over all pairs."""
    return L.rebel_loss(b["logp"], b["logp_old"], b["scores"], k["eta"])


@method("vmpo", "V-MPO (group)", "group", 4, variant="beyond the paper", learned=("log_temperature", "log_alpha"))
def _vmpo(b, k):
    """q ∝ π_old·exp(A/η) on the top half, learned η, KL trust region; no critic."""
    learned = b["learned"]
    return L.vmpo_loss(b["logp"], b["logp_old"], b["scores"], learned["log_temperature"], learned["log_alpha"])


register(tpo_refill(2.0, "tpo_refill"))


@method("tpo_token", "TPO_token", "token", 4)
def _tpo_token(b, k):
    """Per-state TPO over K i.i.d. next-token candidates (dense rewards)."""
    return L.tpo_token_loss(b["logp"], b["logp_old"], b["scores"], k["eta"])


method(
    "grpo_token",
    "GRPO_token",
    "token",
    4,
    summary="GRPO on single-token log-probs of the per-state candidates (dense rewards).",
)(_grpo_loss)


@method("ppo", "PPO", "single", 4)
def _ppo(b, k):
    """Per-token clipped surrogate, A_t = r_t - per-position batch mean, no critic."""
    return L.ppo_loss(b["token_logp"], b["token_logp_old"], _adv(b), clip_eps=k["clip_eps"])


def _bandit_pg(logits, actions, labels, adv, knobs):
    return L.pg_loss(_picked(logits, actions)[:, None], adv[:, None])


@method("pg", "PG", "single", 4, bandit=_bandit_pg)
def _pg(b, k):
    """REINFORCE with the per-position batch-mean baseline."""
    return L.pg_loss(b["token_logp"], _adv(b))


def _bandit_dg(logits, actions, labels, adv, knobs):
    return L.dg_loss(_picked(logits, actions)[:, None], adv[:, None], knobs["eta"])


@method("dg", "DG", "single", 1, bandit=_bandit_dg)
def _dg(b, k):
    """Delightful PG: gate sigmoid(A·surprisal/η) on the PG term (1 epoch; diverges with more)."""
    return L.dg_loss(b["token_logp"], _adv(b), k["eta"])


register(
    Method(
        name="ce",
        title="CE (supervised)",
        sampling="bandit",
        epochs=1,
        loss=None,
        summary="Supervised cross-entropy with the true label: the supervised reference, not RL and not an upper bound "
        "(it sees every label, and on a small training set it overfits).",
        variant="supervised",
        bandit=lambda logits, a, y, adv, k: L.cross_entropy_loss(logits, y),
    )
)

TOKEN_METHODS = tuple(n for n, m in REGISTRY.items() if m.loss is not None)
BANDIT_METHODS = tuple(n for n, m in REGISTRY.items() if m.bandit is not None)


def get(name: str) -> Method:
    if name not in REGISTRY:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(REGISTRY)}")
    return REGISTRY[name]


get_method = get  # the name ``tpo_core`` exports it under (``tpo_core.get_method("tpo")``)
