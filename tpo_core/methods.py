"""One registry of methods, so the book, the demo and the CLI all name them the same way.

Each :class:`Method` says how it samples and what it minimises, on the token tasks and (where it
exists) on the MNIST bandit. The loss adapters only unpack a batch and call :mod:`tpo_core.losses`.

Sampling kinds on the token tasks:

* ``group``  — K full completions per prompt; batch: ``logp``/``logp_old``/``scores`` [B, K],
  ``token_logp``/``token_logp_old`` [B, K, H];
* ``single`` — one completion per prompt; batch: ``token_logp``/``token_logp_old``/``rewards`` [B, H];
* ``token``  — one behaviour trajectory, K next-token candidates per state (dense rewards only);
  batch: ``logp``/``logp_old``/``scores`` [B, H, K].

Hyperparameters ``hp``: eta, beta, clip_eps, std_floor (see :class:`tpo_core.config.TokenConfig`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import jax
import jax.numpy as jnp

from . import losses as L


@dataclasses.dataclass(frozen=True)
class Method:
    name: str
    title: str
    sampling: str  # "group" | "single" | "token"
    epochs: int  # default number of update epochs per batch
    loss: Callable  # (batch, hp) -> scalar, on the token tasks
    summary: str
    variant: str = "paper"  # "paper", "ablation", "TRL/verl", "DAPO", "beyond the paper"
    bandit: Optional[Callable] = None  # (logits, actions, labels, adv, hp) -> scalar
    learned: tuple = ()  # names of extra scalar parameters learned with the policy (V-MPO)
    oversample: float = 1.0  # refill variants: groups drawn per episode = round(B·oversample) (see tpo_refill)
    refill: bool = False  # keep the first B informative groups of the draw; mask the rest (batch["keep"])

    @property
    def dense_only(self) -> bool:
        return self.sampling == "token"

    def groups_drawn(self, B: int) -> int:
        """Prompts (groups) sampled per episode for a batch of B: B, or round(B·oversample) for a refill variant.
        Rollouts per episode are this times K, the count an interaction-matched comparison uses."""
        return max(B, int(round(B * self.oversample)))


def _adv(batch):
    return L.batch_baseline_advantages(batch["rewards"])


# ---- bandit adapters: logits [N, C], actions [N], labels [N], adv = r - Σπ² [N] ------------------
def _bandit_u(logits, actions, adv):
    onehot = jax.nn.one_hot(actions, logits.shape[-1])
    return jnp.sign(adv)[:, None] * L.standardize(onehot)  # u_a = 3 sign(A), u_j = -sign(A)/3 (C=10)


def _picked(logits, actions):
    return jnp.take_along_axis(jax.nn.log_softmax(logits), actions[:, None], -1)[:, 0]


def _bandit_tpo(logits, actions, labels, adv, hp):
    u = _bandit_u(logits, actions, adv)
    q = jax.lax.stop_gradient(jax.nn.softmax(jax.nn.log_softmax(logits) + u / hp["eta"]))
    return -(q * jax.nn.log_softmax(logits)).sum(-1).mean()


def _bandit_group_pg(logits, actions, labels, adv, hp):
    u = _bandit_u(logits, actions, adv)
    return -(jnp.take_along_axis(u, actions[:, None], -1)[:, 0] * _picked(logits, actions)).mean()


def _bandit_grpo(logits, actions, labels, adv, hp):
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


def _tpo_refill_loss(b, hp):
    """TPO's cross-entropy to q, averaged over the kept (informative) groups only; 0 when none is kept."""
    q = L.tpo_target(b["logp_old"], b["scores"], hp["eta"], std_floor=hp["std_floor"])
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
        name or f"tpo_refill_x{oversample:g}",
        f"TPO + refill (×{oversample:g})",
        "group",
        4,
        _tpo_refill_loss,
        f"TPO on the first B informative groups of {oversample:g}·B drawn (DAPO's dynamic sampling, fixed "
        "oversampling; zero-variance filler masked when fewer are informative).",
        variant="beyond the paper",
        oversample=float(oversample),
        refill=True,
    )


REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    REGISTRY[method.name] = method
    return method


register(
    Method(
        "tpo",
        "TPO",
        "group",
        4,
        lambda b, hp: L.tpo_loss(b["logp"], b["logp_old"], b["scores"], hp["eta"], std_floor=hp["std_floor"]),
        "Cross-entropy to q ∝ p_old·exp(u/η) over the K completions of each prompt.",
        bandit=_bandit_tpo,
    )
)
register(
    Method(
        "tpo_no_anchor",
        "TPO (no anchor)",
        "group",
        4,
        lambda b, hp: L.tpo_loss(b["logp"], b["logp_old"], b["scores"], hp["eta"], anchor=False),
        "Ablation: q = softmax(u/η), forgetting p_old.",
        variant="ablation",
    )
)
register(
    Method(
        "group_pg",
        "Group PG",
        "group",
        4,
        lambda b, hp: L.group_pg_loss(b["logp"], b["scores"], hp["eta"]),
        "Ablation: -Σ (u_i/η) log π(y_i), no target, no ratio.",
        variant="ablation",
        bandit=_bandit_group_pg,
    )
)
register(
    Method(
        "grpo",
        "GRPO",
        "group",
        4,
        lambda b, hp: L.grpo_loss(b["logp"], b["logp_old"], b["scores"], beta=hp["beta"], clip_eps=hp["clip_eps"]),
        "Paper semantics: population std, sequence-level ratio, k3 KL to the rollout, β 0.04, clip 0.2.",
        bandit=_bandit_grpo,
    )
)
register(
    Method(
        "grpo_no_kl",
        "GRPO (no KL)",
        "group",
        4,
        lambda b, hp: L.grpo_loss(b["logp"], b["logp_old"], b["scores"], beta=0.0, clip_eps=hp["clip_eps"]),
        "GRPO with β = 0.",
    )
)
register(
    Method(
        "grpo_masked",
        "GRPO (masked)",
        "group",
        4,
        lambda b, hp: L.grpo_loss(
            b["logp"], b["logp_old"], b["scores"], beta=hp["beta"], clip_eps=hp["clip_eps"], mask_zero_var=True
        ),
        "GRPO with zero-variance groups dropped (mean over informative groups).",
    )
)
register(
    Method(
        "grpo_trl",
        "GRPO (TRL/verl)",
        "group",
        4,
        lambda b, hp: L.grpo_token_ratio_loss(
            b["token_logp"], b["token_logp_old"], b["scores"], beta=hp["beta"], clip_eps=hp["clip_eps"], ddof=1
        ),
        "TRL/verl flavour: sample std, per-token ratio and KL, mean over tokens then completions.",
        variant="TRL/verl",
    )
)
register(
    Method(
        "dapo",
        "DAPO",
        "group",
        4,
        lambda b, hp: L.dapo_loss(b["token_logp"], b["token_logp_old"], b["scores"], clip_eps=hp["clip_eps"]),
        "Clip-higher (0.2/0.28), token-level aggregation, no KL, all-equal groups dropped.",
        variant="DAPO",
    )
)
register(
    Method(
        "rloo",
        "RLOO",
        "group",
        1,
        lambda b, hp: L.rloo_loss(b["logp"], b["scores"]),
        "REINFORCE with a leave-one-out baseline over the group.",
        variant="beyond the paper",
    )
)
register(
    Method(
        "rebel",
        "REBEL",
        "group",
        4,
        lambda b, hp: L.rebel_loss(b["logp"], b["logp_old"], b["scores"], hp["eta"]),
        "Regress log-ratio differences onto reward differences over all pairs.",
        variant="beyond the paper",
    )
)
register(
    Method(
        "vmpo",
        "V-MPO (group)",
        "group",
        4,
        lambda b, hp: L.vmpo_loss(
            b["logp"], b["logp_old"], b["scores"], b["learned"]["log_temperature"], b["learned"]["log_alpha"]
        ),
        "q ∝ π_old·exp(A/η) on the top half, learned η, KL trust region; no critic.",
        variant="beyond the paper",
        learned=("log_temperature", "log_alpha"),
    )
)
register(tpo_refill(2.0, "tpo_refill"))
register(
    Method(
        "tpo_token",
        "TPO_token",
        "token",
        4,
        lambda b, hp: L.tpo_token_loss(b["logp"], b["logp_old"], b["scores"], hp["eta"]),
        "Per-state TPO over K i.i.d. next-token candidates (dense rewards).",
    )
)
register(
    Method(
        "grpo_token",
        "GRPO_token",
        "token",
        4,
        lambda b, hp: L.grpo_loss(b["logp"], b["logp_old"], b["scores"], beta=hp["beta"], clip_eps=hp["clip_eps"]),
        "GRPO on single-token log-probs of the per-state candidates (dense rewards).",
    )
)
register(
    Method(
        "ppo",
        "PPO",
        "single",
        4,
        lambda b, hp: L.ppo_loss(b["token_logp"], b["token_logp_old"], _adv(b), clip_eps=hp["clip_eps"]),
        "Per-token clipped surrogate, A_t = r_t - per-position batch mean, no critic.",
    )
)
register(
    Method(
        "pg",
        "PG",
        "single",
        4,
        lambda b, hp: L.pg_loss(b["token_logp"], _adv(b)),
        "REINFORCE with the per-position batch-mean baseline.",
        bandit=lambda logits, a, y, adv, hp: L.pg_loss(_picked(logits, a)[:, None], adv[:, None]),
    )
)
register(
    Method(
        "dg",
        "DG",
        "single",
        1,
        lambda b, hp: L.dg_loss(b["token_logp"], _adv(b), hp["eta"]),
        "Delightful PG: gate sigmoid(A·surprisal/η) on the PG term (1 epoch; diverges with more).",
        bandit=lambda logits, a, y, adv, hp: L.dg_loss(_picked(logits, a)[:, None], adv[:, None], hp["eta"]),
    )
)
register(
    Method(
        "ce",
        "CE (supervised)",
        "bandit",
        1,
        None,
        "Supervised cross-entropy with the true label: the supervised reference, not RL and not an upper bound "
        "(it sees every label, and on a small training set it overfits).",
        variant="supervised",
        bandit=lambda logits, a, y, adv, hp: L.cross_entropy_loss(logits, y),
    )
)

TOKEN_METHODS = tuple(n for n, m in REGISTRY.items() if m.loss is not None)
BANDIT_METHODS = tuple(n for n, m in REGISTRY.items() if m.bandit is not None)


def get(name: str) -> Method:
    if name not in REGISTRY:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(REGISTRY)}")
    return REGISTRY[name]


get_method = get  # the name ``tpo_core`` exports it under (``tpo_core.get_method("tpo")``)
