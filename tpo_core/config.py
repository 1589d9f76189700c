"""Run configurations, validated eagerly by :mod:`tpo_core.checks` with errors that name the parameter."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from . import checks, methods, tasks
from .constants import DENSE_REWARDS, STD_FLOOR

MAX_K = 1024
# Scalar hyperparameters that are traced values of a compiled program, not part of its cache key: a run with a
# new value reuses the program compiled for the same shapes, and a sweep over them is one vmapped program.
TOKEN_KNOBS = ("eta", "lr", "beta", "clip_eps", "std_floor", "reward_noise")
BANDIT_KNOBS = ("eta", "lr")


@dataclasses.dataclass(frozen=True)
class TokenConfig:
    """Token-reversal family (arXiv 2604.06159 §3.4–3.6). Defaults: the Table-3 prompt-matched H=10 run."""

    method: str = "tpo"
    target: str = "reverse_copy"
    reward: str = "terminal"
    H: int = 10  # prompt = answer length
    V: int = 2  # vocabulary
    B: int = 100  # prompts per episode
    K: int = 8  # completions per prompt (group) or candidates per state (token)
    episodes: int = 2000
    epochs: Optional[int] = None  # None: the method's default (4, or 1 for DG/RLOO)
    lr: float = 1e-3
    eta: float = 1.0
    beta: float = 0.04  # GRPO's KL coefficient
    clip_eps: float = 0.2
    std_floor: float = STD_FLOOR  # σ threshold of the standardisation (the paper's)
    optimizer: str = "muon"  # "muon" (Muon on 2-D params + AdamW) or "adam"
    d_model: int = 64
    heads: int = 2
    layers: int = 2
    ffn: int = 256
    track: int = 2  # groups whose p and q are recorded each episode
    old_logp: str = "sampling"  # behaviour log-probs kept from sampling (KV path), or "teacher_forced"
    reward_noise: float = 0.0  # std of Gaussian noise added to group/candidate scores (0 = paper)

    def __post_init__(self):
        m = methods.get(self.method)
        checks.require(m.loss is not None, "method", "has no token-task loss (bandit only)", self.method)
        tasks.check_target(self.target)
        tasks.check_reward(self.reward)
        if m.dense_only:
            checks.require(
                self.reward in DENSE_REWARDS, "reward", f"must be dense {DENSE_REWARDS} for {self.method}", self.reward
            )
        checks.integer("H", self.H, 2, 64)
        checks.integer("V", self.V, 2, 4096)
        checks.integer("B", self.B, 1)
        checks.integer("K", self.K, 2, MAX_K)
        checks.integer("episodes", self.episodes, 1)
        if self.epochs is not None:
            checks.integer("epochs", self.epochs, 1, 64)
        for name in ("lr", "eta", "clip_eps", "std_floor"):
            checks.positive(name, getattr(self, name))
        checks.require(checks.is_real(self.beta) and self.beta >= 0, "beta", "must be >= 0", self.beta)
        checks.require(self.optimizer in ("muon", "adam"), "optimizer", "must be 'muon' or 'adam'", self.optimizer)
        checks.integer("track", self.track, 0)
        checks.require(
            self.old_logp in ("teacher_forced", "sampling"),
            "old_logp",
            "must be 'teacher_forced' or 'sampling'",
            self.old_logp,
        )
        checks.non_negative("reward_noise", self.reward_noise)
        checks.require(
            self.d_model % max(self.heads, 1) == 0, "heads", f"must divide d_model={self.d_model}", self.heads
        )

    @property
    def spec(self) -> methods.Method:
        return methods.get(self.method)

    @property
    def n_epochs(self) -> int:
        return self.epochs if self.epochs is not None else self.spec.epochs

    @property
    def samples_per_prompt(self) -> int:
        return self.K if self.spec.groups else 1

    @property
    def knobs(self) -> dict:
        """The traced scalars of this run (:data:`TOKEN_KNOBS`)."""
        return {k: float(getattr(self, k)) for k in TOKEN_KNOBS}

    @property
    def static(self) -> "TokenConfig":
        """This config with every traced knob and ``episodes`` at its default (the program's cache key)."""
        return _static(self, TOKEN_KNOBS)

    def replace(self, **changes) -> "TokenConfig":
        return dataclasses.replace(self, **changes)

    def memory_floor_bytes(self, n_runs: int = 1) -> int:
        """A lower bound on the memory one training step of ``n_runs`` vmapped runs needs: the float32
        activations the backward pass must keep (the residual stream and the attention weights of every layer
        over the prompt + answer of all B·K sequences) plus the two [B, K, H, V] log-prob tensors (sampling's and
        the loss's). Weights, optimizer state and XLA's temporaries come on top, so a configuration whose
        floor exceeds the memory available cannot run."""
        n_seq = self.B * self.samples_per_prompt
        T = 2 * self.H
        per_seq = T * self.layers * (self.d_model + self.heads * T) + 2 * self.H * self.V
        return 4 * int(n_runs) * n_seq * per_seq

    def interaction_matched(self) -> "TokenConfig":
        """Single-sample methods see as many samples as a group method: B·K prompts, lr·sqrt(K)."""
        if not self.spec.single_sample:
            return self
        return self.replace(B=self.B * self.K, lr=self.lr * math.sqrt(self.K))


@dataclasses.dataclass(frozen=True)
class BanditConfig:
    """MNIST contextual bandit (arXiv 2604.06159 §3.3): Adam 1e-3, 100 images a step, 10,000 steps."""

    method: str = "tpo"
    steps: int = 10_000
    batch: int = 100
    lr: float = 1e-3
    eta: float = 1.0
    eval_every: int = 200
    hidden: tuple = (50, 50)

    def __post_init__(self):
        m = methods.get(self.method)
        checks.require(m.bandit is not None, "method", "has no bandit loss", self.method)
        checks.integer("steps", self.steps, 1)
        checks.integer("batch", self.batch, 1)
        checks.integer("eval_every", self.eval_every, 1)
        checks.require(
            self.steps % self.eval_every == 0,
            "steps",
            f"must be a multiple of eval_every={self.eval_every}",
            self.steps,
        )
        checks.positive("lr", self.lr)
        checks.positive("eta", self.eta)

    @property
    def knobs(self) -> dict:
        """The traced scalars of this run (:data:`BANDIT_KNOBS`)."""
        return {k: float(getattr(self, k)) for k in BANDIT_KNOBS}

    @property
    def static(self) -> "BanditConfig":
        """This config with the traced knobs and ``steps`` at their defaults (the program's cache key)."""
        return _static(self, BANDIT_KNOBS + ("steps",))

    def replace(self, **changes) -> "BanditConfig":
        return dataclasses.replace(self, **changes)


def _static(cfg, names):
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
    names = tuple(names) + (("episodes",) if "episodes" in defaults else ())
    return dataclasses.replace(cfg, **{n: defaults[n] for n in names})


def check_sweep(cfg, sweep) -> list[dict]:
    """Validate ``sweep`` ({knob: [values]}, all lists of one length) against ``cfg``; return its points
    (one dict per sweep value, zipped across knobs), each checked by building the config it describes."""
    if not sweep:
        return [{}]
    if not isinstance(sweep, dict):
        raise ValueError(f"sweep must be a dict {{knob: [values]}}, got {sweep!r}")
    allowed = tuple(cfg.knobs)
    lengths = set()
    for name, values in sweep.items():
        checks.require(name in allowed, "sweep", f"keys must be traced knobs {allowed}", name)
        checks.require(
            isinstance(values, (list, tuple)) and len(values) > 0,
            f"sweep[{name!r}]",
            "must be a non-empty list of numbers",
            values,
        )
        lengths.add(len(values))
    checks.require(
        len(lengths) == 1,
        "sweep",
        "lists must all have the same length (values are zipped)",
        {k: len(v) for k, v in sweep.items()},
    )
    n = lengths.pop()
    points = [{k: v[i] for k, v in sweep.items()} for i in range(n)]
    for p in points:
        cfg.replace(**p)  # raises ValueError naming the knob
    return points
