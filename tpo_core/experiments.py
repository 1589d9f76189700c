"""Reproduce the paper: one preset per claim of PAPER.md §5, three budgets each, resumable and sharded.

    python -m tpo_core reproduce --list
    python -m tpo_core reproduce table3 --budget cpu --out results/table3
    python -m tpo_core report results --out results/REPORT.md

A :class:`Preset` turns a budget (``smoke`` | ``cpu`` | ``paper``) into a list of :class:`Run` s (one
configuration, several seeds). :func:`run_preset` trains every run, writes its per-seed curves to
``DIR/<run>.npz`` (atomically, with the hash of its configuration), then ``DIR/summary.json`` (our number,
its seed standard error and the paper's number side by side) and ``DIR/figure.html`` (self-contained
plotly). A run whose NPZ already exists with the same configuration hash is loaded, not retrained, so an
interrupted reproduction resumes where it stopped.

Scale-out: each run is one program (``jit`` of ``vmap`` over seeds of ``scan`` over episodes); the seed
axis is padded to a multiple of ``jax.device_count()`` and sharded over all devices by
:func:`tpo_core.train.shard_seeds` (one program, no process pool). With ``--distributed``,
``jax.distributed.initialize()`` runs first, so on several hosts the same command sees every host's
devices; metrics are gathered with ``multihost_utils.process_allgather`` and only process 0 writes.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import pathlib
import re
import sys
import time
from typing import Callable, Optional, Sequence

import numpy as np

from .config import BanditConfig, TokenConfig

BUDGETS = ("smoke", "cpu", "paper")
METRICS = {
    "final_error": "final error (%)",
    "steps_to_1pct": "steps to 1%",
    "final_greedy_error": "final greedy test error (%)",
}
SMOKE_MODEL = dict(d_model=16, heads=2, layers=1, ffn=32)
SMOKE_TASK = dict(H=3, B=4, K=4, episodes=6)


# --------------------------------------------------------------------------------------------
# presets
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Run:
    """One configuration of a preset, trained for several seeds."""

    key: str                      # unique within the preset, e.g. "tpo H=7 P"
    cfg: object                   # TokenConfig | BanditConfig
    seeds: tuple
    labels: tuple = ()            # (("method", "tpo"), ("H", 7), ...): what varies across the preset

    @property
    def kind(self) -> str:
        return "bandit" if isinstance(self.cfg, BanditConfig) else "token"

    @property
    def label(self) -> dict:
        return dict(self.labels)

    @property
    def method(self) -> str:
        return self.cfg.method

    @property
    def length(self) -> int:
        """Points on the curve: episodes, or evaluation blocks for the bandit."""
        return self.cfg.steps // self.cfg.eval_every if self.kind == "bandit" else self.cfg.episodes

    def config_hash(self) -> str:
        blob = json.dumps(dict(kind=self.kind, config=dataclasses.asdict(self.cfg), seeds=list(self.seeds)),
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def filename(self) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "_", self.key).strip("_") + ".npz"


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    title: str
    claim: str                    # what the paper says, in one or two sentences
    metrics: tuple                # keys of METRICS
    build: Callable               # budget -> (list[Run], note on what the budget changes)
    paper: Callable               # (run label dict, metric) -> paper value spec (see compare()); smaller
    #                               budgets are compared with the paper's nearest setting (H clamped to the
    #                               paper's range), marked "other setting" in the report
    paper_setting: str            # the paper's setting, for the report

    def runs(self, budget: str):
        check_budget(budget)
        return self.build(budget)


def check_budget(budget: str) -> str:
    if budget not in BUDGETS:
        raise ValueError(f"budget must be one of {', '.join(BUDGETS)}, got {budget!r}")
    return budget


def _seeds(n: int) -> tuple:
    return tuple(range(n))


def _token(budget: str, **kw) -> TokenConfig:
    """A token-task config; ``smoke`` shrinks the model and the task to seconds."""
    base = dict(track=0)
    if budget == "smoke":
        base.update(SMOKE_MODEL)
        kw.update(H=SMOKE_TASK["H"], B=SMOKE_TASK["B"], episodes=SMOKE_TASK["episodes"],
                  K=min(kw.get("K", SMOKE_TASK["K"]), SMOKE_TASK["K"]))
    return TokenConfig(**{**base, **kw})


def _lookup(table: dict, *keys):
    return table.get(keys if len(keys) > 1 else keys[0])


NEVER = "-"            # the paper's "−": never reached 1% (steps) or above 95% error (final)


# ---- Figure 4: MNIST contextual bandit ------------------------------------------------------
MNIST_METHODS = ("tpo", "pg", "grpo", "dg", "group_pg", "ce")
MNIST_PAPER = {"tpo": 2.9, "pg": 5.3, "grpo": 5.9, "group_pg": 7.2, "dg": 3.2}


def _mnist_build(budget):
    if budget == "smoke":
        steps, every, seeds, note = 200, 100, _seeds(1), "200 steps, 1 seed (code path only)"
    elif budget == "cpu":
        steps, every, seeds, note = 10_000, 200, _seeds(5), "the paper's 10,000 steps, 5 seeds instead of 20"
    else:
        steps, every, seeds, note = 10_000, 200, _seeds(20), "the paper's setting: 10,000 steps, 20 seeds"
    runs = [Run(m, BanditConfig(method=m, steps=steps, eval_every=every), seeds, (("method", m),))
            for m in MNIST_METHODS]
    return runs, note


# ---- Table 1: vocabulary sweep, dense bag reward ---------------------------------------------
DENSE_METHODS = ("tpo_token", "grpo_token", "dg", "ppo")
TABLE1_PAPER = {("tpo_token", 2): 58, ("tpo_token", 4): 74, ("tpo_token", 8): 103, ("tpo_token", 16): 102,
                ("grpo_token", 2): 904, ("grpo_token", 4): 141, ("grpo_token", 8): 124, ("grpo_token", 16): 148,
                ("dg", 2): 199, ("dg", 4): 273, ("dg", 8): 314, ("dg", 16): 393,
                ("ppo", 2): 872, ("ppo", 4): 181, ("ppo", 8): 191, ("ppo", 16): 259}


def _table1_build(budget):
    if budget == "smoke":
        grid, seeds, eps, note = [(m, 2) for m in DENSE_METHODS] + [("tpo_token", 4)], _seeds(1), 6, "tiny"
    elif budget == "cpu":
        grid = [(m, v) for v in (2, 8) for m in DENSE_METHODS]
        seeds, eps, note = _seeds(2), 300, "V ∈ {2, 8}, 2 seeds, 300 episodes (paper: 4 vocabularies, 20 seeds, 1000)"
    else:
        grid = [(m, v) for v in (2, 4, 8, 16) for m in DENSE_METHODS]
        seeds, eps, note = _seeds(20), 1000, "the paper's setting: H=10, K=8, B=100, 20 seeds, 1000 episodes"
    runs = [Run(f"{m} V={v}", _token(budget, method=m, reward="bag", V=v, episodes=eps), seeds,
                (("method", m), ("V", v))) for m, v in grid]
    return runs, note


# ---- Table 2: targets × dense rewards ---------------------------------------------------------
TARGETS = ("copy", "flip", "reverse_copy", "reverse_flip")
_T2 = {"bag": {"tpo_token": (81, 56, 55, 59), "grpo_token": (338, 104, 352, 209), "dg": (219, 201, 202, 200),
               "ppo": (170, 146, NEVER, 143)},
       "sequential": {"tpo_token": (295, 321, 159, 276), "grpo_token": (NEVER,) * 4, "dg": (439, 349, 515, 309),
                      "ppo": (NEVER,) * 4}}
TABLE2_PAPER = {(m, r, t): v[i] for r, d in _T2.items() for m, v in d.items() for i, t in enumerate(TARGETS)}


def _table2_build(budget):
    if budget == "smoke":
        grid = [(m, "bag", "reverse_copy") for m in DENSE_METHODS] + [("tpo_token", "sequential", "reverse_copy")]
        seeds, eps, note = _seeds(1), 6, "tiny"
    elif budget == "cpu":
        grid = [(m, r, t) for r in ("bag", "sequential") for t in ("copy", "reverse_copy") for m in DENSE_METHODS]
        seeds, eps, note = _seeds(2), 300, "targets copy and reverse copy, 2 seeds, 300 episodes (paper: 4, 10, 1000)"
    else:
        grid = [(m, r, t) for r in ("bag", "sequential") for t in TARGETS for m in DENSE_METHODS]
        seeds, eps, note = _seeds(10), 1000, "the paper's setting: H=10, V=2, K=8, 10 seeds, 1000 episodes"
    runs = [Run(f"{m} {r} {t}", _token(budget, method=m, reward=r, target=t, episodes=eps), seeds,
                (("method", m), ("reward", r), ("target", t))) for m, r, t in grid]
    return runs, note


# ---- Table 3: terminal reward, prompt- and interaction-matched -------------------------------
TABLE3_METHODS = ("tpo", "grpo", "grpo_no_kl", "ppo", "dg")
_T3 = {"tpo": (6.9, 8.6, 6.1, 7.4, 1.8, 2.8, 5.3, 19.0),
       "grpo": (14.5, 27.6, 30.0, 50.4, 9.6, 23.2, 36.2, 48.7),
       "grpo_no_kl": (66.6, 92.5, NEVER, NEVER, 78.1, 83.8, NEVER, NEVER),
       "ppo": (12.0, 26.3, 90.6, NEVER, 38.6, 62.1, 66.2, NEVER),
       "dg": (33.8, 58.8, NEVER, NEVER, 47.7, 69.4, NEVER, NEVER)}
TABLE3_PAPER = {(m, H, s): v[i + 4 * j] for m, v in _T3.items() for j, s in enumerate("PI")
                for i, H in enumerate((7, 8, 9, 10))}


def _table3_build(budget):
    if budget == "smoke":
        grid = [(m, 3, "P") for m in TABLE3_METHODS] + [("ppo", 3, "I")]
        seeds, eps, note = _seeds(1), 6, "tiny"
    elif budget == "cpu":
        grid = [(m, 6, "P") for m in ("tpo", "grpo", "grpo_no_kl")]
        seeds, eps = _seeds(2), 300
        note = ("H=6 prompt-matched only, TPO/GRPO/GRPO-no-KL, 2 seeds, 300 episodes "
                "(paper: H=7..10, P and I, 5 methods, 20 seeds, 2000 episodes; compared with its H=7 column)")
    else:
        grid = [(m, H, s) for s in "PI" for H in (7, 8, 9, 10) for m in TABLE3_METHODS]
        seeds, eps, note = _seeds(20), 2000, "the paper's setting: V=2, K=8, B=100, 20 seeds, 2000 episodes"
    runs = []
    for m, H, s in grid:
        cfg = _token(budget, method=m, reward="terminal", H=H, episodes=eps)
        if s == "I":
            cfg = cfg.interaction_matched()
        runs.append(Run(f"{m} H={H} {s}", cfg, seeds, (("method", m), ("H", H), ("setting", s))))
    return runs, note


# ---- anchor ablation ----------------------------------------------------------------------------
ANCHOR_PAPER = {("tpo", 7): 6.9, ("tpo", 8): 8.6, ("tpo", 10): 7.4,
                ("tpo_no_anchor", 10): (">", 99.0), ("group_pg", 10): (">", 99.0)}


def _anchor_build(budget):
    methods = ("tpo", "tpo_no_anchor", "group_pg")
    if budget == "smoke":
        Hs, seeds, eps, note = (3,), _seeds(1), 6, "tiny"
    elif budget == "cpu":
        Hs, seeds, eps, note = (6,), _seeds(2), 300, "H=6, 2 seeds, 300 episodes (paper: H=7, 8, 10, 2000 episodes)"
    else:
        Hs, seeds, eps, note = (7, 8, 10), _seeds(20), 2000, "the paper's setting: K=8, B=100, 2000 episodes, 20 seeds"
    runs = [Run(f"{m} H={H}", _token(budget, method=m, H=H, episodes=eps), seeds, (("method", m), ("H", H)))
            for H in Hs for m in methods]
    return runs, note


# ---- ablations at H=8, B=256, K=32 ----------------------------------------------------------------
K_PAPER = {("tpo", k): v for k, v in zip((4, 8, 16, 32, 64), (8.9, 5.2, 5.1, 2.6, 0.36))}
K_PAPER.update({("grpo", k): v for k, v in zip((4, 8, 16, 32, 64), (19.4, 19.8, 9.2, 4.4, 5.6))})
EPOCH_PAPER = {("tpo", 1): 0.02, ("tpo", 2): ("<", 2.3), ("tpo", 4): 0.05, ("tpo", 8): ("<", 2.3),
               ("tpo", 16): ("<", 2.3)}
EPOCH_PAPER.update({("grpo", e): v for e, v in zip((1, 2, 4, 8, 16), (4.3, 37.6, 6.3, 3.3, 1.1))})
MASKED_PAPER = {"tpo": 0.05, "grpo": 6.3, "grpo_masked": 29.7}
ABLATION_SEEDS = 10    # PAPER.md does not state the ablations' seed count: 10 assumed


def _ablation_base(budget):
    if budget == "smoke":
        return dict(H=3, B=4, K=4, episodes=6), _seeds(1), "tiny"
    if budget == "cpu":
        return (dict(H=5, B=32, K=8, episodes=200), _seeds(2),
                "H=5, B=32, 2 seeds, 200 episodes (paper: H=8, B=256, 2000 episodes)")
    return (dict(H=8, B=256, K=32, episodes=2000), _seeds(ABLATION_SEEDS),
            f"the paper's setting: H=8, B=256, K=32, 2000 episodes; {ABLATION_SEEDS} seeds (count not stated)")


def _k_build(budget):
    base, seeds, note = _ablation_base(budget)
    grid = {"smoke": [("tpo", 2), ("tpo", 4), ("grpo", 2)],
            "cpu": [(m, k) for k in (4, 8, 16) for m in ("tpo", "grpo")],
            "paper": [(m, k) for k in (4, 8, 16, 32, 64) for m in ("tpo", "grpo")]}[budget]
    runs = [Run(f"{m} K={k}", _token(budget, method=m, reward="terminal", **{**base, "K": k}), seeds,
                (("method", m), ("K", k))) for m, k in grid]
    return runs, note + ("; K ∈ {4, 8, 16}" if budget == "cpu" else "")


def _epoch_build(budget):
    base, seeds, note = _ablation_base(budget)
    grid = {"smoke": [("tpo", 1), ("tpo", 2), ("grpo", 1)],
            "cpu": [(m, e) for e in (1, 2, 4, 8) for m in ("tpo", "grpo")],
            "paper": [(m, e) for e in (1, 2, 4, 8, 16) for m in ("tpo", "grpo")]}[budget]
    runs = [Run(f"{m} epochs={e}", _token(budget, method=m, reward="terminal", epochs=e, **base), seeds,
                (("method", m), ("epochs", e))) for m, e in grid]
    return runs, note + ("; K=8 (paper 32), epochs ∈ {1, 2, 4, 8}" if budget == "cpu" else "")


def _masked_build(budget):
    base, seeds, note = _ablation_base(budget)
    runs = [Run(m, _token(budget, method=m, reward="terminal", **base), seeds, (("method", m),))
            for m in ("tpo", "grpo", "grpo_masked")]
    return runs, note + ("; K=8 (paper 32)" if budget == "cpu" else "")


# ---- η sweep ---------------------------------------------------------------------------------------
ETA_PAPER = {("final_error", 0.25): 1.0, ("final_error", 0.5): 0.0, ("final_error", 1.0): 0.7,
             ("final_error", 2.0): 1.0, ("final_error", 4.0): 0.8,
             ("steps_to_1pct", 0.25): 72, ("steps_to_1pct", 0.5): 67, ("steps_to_1pct", 1.0): 96,
             ("steps_to_1pct", 2.0): 141, ("steps_to_1pct", 4.0): 260}


def _eta_build(budget):
    if budget == "smoke":
        etas, seeds, eps, note = (0.5, 2.0), _seeds(1), 6, "tiny"
    elif budget == "cpu":
        etas, seeds, eps, note = (0.25, 1.0, 4.0), _seeds(2), 300, "η ∈ {0.25, 1, 4}, 2 seeds, 300 episodes"
    else:
        etas, seeds, eps, note = (0.25, 0.5, 1.0, 2.0, 4.0), _seeds(10), 1000, "H=10, K=8, B=100, 10 seeds, 1000 episodes"
    note += ("; the paper does not state the reward variant: TPO_token with the dense bag reward is assumed")
    runs = [Run(f"tpo_token eta={eta:g}", _token(budget, method="tpo_token", reward="bag", eta=eta, episodes=eps),
                seeds, (("method", "tpo_token"), ("eta", eta))) for eta in etas]
    return runs, note


# ---- beyond the paper --------------------------------------------------------------------------------
def _beyond_base(budget):
    if budget == "smoke":
        return dict(H=3, episodes=6), _seeds(1), "tiny"
    if budget == "cpu":
        return dict(H=6, episodes=300), _seeds(2), "H=6, 2 seeds, 300 episodes"
    return dict(H=10, episodes=2000), _seeds(20), "Table 3's setting: H=10, K=8, B=100, 20 seeds, 2000 episodes"


def _dapo_build(budget):
    base, seeds, note = _beyond_base(budget)
    runs = [Run(m, _token(budget, method=m, reward="terminal", **base), seeds, (("method", m), ("H", base["H"])))
            for m in ("tpo", "dapo", "grpo")]
    return runs, note


STD_NOISE = 0.01


def _std_noise_build(budget):
    base, seeds, note = _beyond_base(budget)
    grid = [("tpo", 0.0, 1e-6), ("tpo", STD_NOISE, 1e-6), ("tpo", STD_NOISE, 0.1), ("grpo", STD_NOISE, 1e-6)]
    runs = [Run(f"{m} noise={n:g} floor={f:g}",
                _token(budget, method=m, reward="terminal", reward_noise=n, std_floor=f, **base), seeds,
                (("method", m), ("noise", n), ("std_floor", f), ("H", base["H"]))) for m, n, f in grid]
    return runs, note + f"; Gaussian score noise σ={STD_NOISE} on every candidate's terminal score"


def _paper_dapo(label, metric):
    return {("tpo", 10): 7.4, ("grpo", 10): 50.4}.get((label["method"], label["H"]))


def _paper_std_noise(label, metric):
    if label["noise"] == 0 and label["std_floor"] == 1e-6 and label["H"] == 10:
        return 7.4
    return None


PRESETS: dict[str, Preset] = {}


def _register(p: Preset):
    PRESETS[p.name] = p


_register(Preset(
    "mnist", "Figure 4: MNIST contextual bandit",
    "Greedy test error after 10,000 steps: TPO 2.9% < DG 3.2% < PG 5.3% < GRPO 5.9% < Group PG 7.2%.",
    ("final_greedy_error",), _mnist_build, lambda lab, met: MNIST_PAPER.get(lab["method"]),
    "MLP 784-50-50-10, Adam 1e-3, batch 100, 10,000 steps, 20 seeds, 60k/10k MNIST"))
_register(Preset(
    "table1", "Table 1: vocabulary sweep (dense bag reward, reverse copy)",
    "TPO_token reaches 1% error fastest at every vocabulary size.",
    ("steps_to_1pct",), _table1_build, lambda lab, met: TABLE1_PAPER.get((lab["method"], lab["V"])),
    "H=10, K=8, B=100, 20 seeds, 1000 episodes"))
_register(Preset(
    "table2", "Table 2: targets × dense rewards",
    "TPO_token is fastest on every target and reward; GRPO_token and PPO never reach 1% with the sequential reward.",
    ("steps_to_1pct",), _table2_build,
    lambda lab, met: TABLE2_PAPER.get((lab["method"], lab["reward"], lab["target"])),
    "H=10, V=2, K=8, B=100, 10 seeds, 1000 episodes"))
_register(Preset(
    "table3", "Table 3: terminal (exact-match) reward",
    "TPO keeps final error below ~10% up to H=10 (prompt-matched); GRPO, GRPO without KL, PPO and DG degrade with H.",
    ("final_error",), _table3_build,
    lambda lab, met: TABLE3_PAPER.get((lab["method"], min(max(lab["H"], 7), 10), lab["setting"])),
    "reverse copy, V=2, K=8, B=100, 2000 episodes, 20 seeds; I = single-sample methods get B=800, lr×√8"))
_register(Preset(
    "anchor", "Ablation: the anchor p_old in TPO's target",
    "Without p_old in the target (TPO-no-anchor) or without a target (Group PG), H=10 ends above 99% error.",
    ("final_error",), _anchor_build, lambda lab, met: ANCHOR_PAPER.get((lab["method"], max(lab["H"], 7))),
    "terminal reward, reverse copy, K=8, B=100, H=7, 8, 10, 2000 episodes"))
_register(Preset(
    "k_sweep", "Ablation: group size K",
    "TPO improves with K (8.9% at K=4 → 0.36% at K=64) and beats GRPO at every K.",
    ("final_error",), _k_build, lambda lab, met: K_PAPER.get((lab["method"], lab["K"])),
    "terminal reward, reverse copy, V=2, H=8, B=256, 2000 episodes, 4 epochs"))
_register(Preset(
    "epoch_sweep", "Ablation: update epochs per batch",
    "TPO stays below 2.3% for 1–16 epochs; GRPO varies from 1.1% to 37.6%.",
    ("final_error",), _epoch_build, lambda lab, met: EPOCH_PAPER.get((lab["method"], lab["epochs"])),
    "terminal reward, reverse copy, V=2, H=8, B=256, K=32, 2000 episodes"))
_register(Preset(
    "grpo_masked", "Ablation: masking zero-variance groups in GRPO",
    "Dropping all-fail groups hurts GRPO (6.3% → 29.7%); TPO reaches 0.05%.",
    ("final_error",), _masked_build, lambda lab, met: MASKED_PAPER.get(lab["method"]),
    "terminal reward, reverse copy, V=2, H=8, B=256, K=32, 4 epochs, 2000 episodes"))
_register(Preset(
    "eta_sweep", "Ablation: TPO temperature η",
    "TPO is robust to η: final error ≤ 1% for η from 0.25 to 4; larger η is slower to 1%.",
    ("final_error", "steps_to_1pct"), _eta_build, lambda lab, met: ETA_PAPER.get((met, lab["eta"])),
    "reverse copy, V=2, H=10, K=8, 10 seeds (reward variant not stated)"))
_register(Preset(
    "dapo", "Beyond the paper: TPO vs DAPO-style GRPO (terminal reward)",
    "Open question of the seed: does DAPO's clip-higher + dropping zero-variance groups close the gap to TPO?",
    ("final_error",), _dapo_build, _paper_dapo, "no paper numbers for DAPO; TPO/GRPO from Table 3 (P, H=10)"))
_register(Preset(
    "std_noise", "Beyond the paper: group standardisation amplifies tiny score noise",
    "Small reward noise in all-fail groups is z-scored to unit scale with the paper's σ floor 1e-6; "
    "a floor of 0.1 keeps such groups inert.",
    ("final_error",), _std_noise_build, _paper_std_noise, "no paper numbers; TPO without noise from Table 3 (P, H=10)"))


def get(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    return PRESETS[name]


# --------------------------------------------------------------------------------------------
# metrics and comparison with the paper
# --------------------------------------------------------------------------------------------
def steps_to(curves, threshold: float = 0.01) -> Optional[int]:
    """First 0-based episode whose seed-mean error is below ``threshold``; None if never."""
    mean = np.asarray(curves, float).mean(0)
    hit = np.nonzero(mean < threshold)[0]
    return int(hit[0]) if hit.size else None


def measure(curves, metric: str, n_boot: int = 1000) -> dict:
    """Our number, its seed standard error and the per-seed values, for curves [S, T] in [0, 1]."""
    curves = np.asarray(curves, float)
    S, T = curves.shape
    if metric in ("final_error", "final_greedy_error"):
        per_seed = 100.0 * curves[:, -1]
        se = float(per_seed.std(ddof=1) / math.sqrt(S)) if S > 1 else float("nan")
        return dict(value=float(per_seed.mean()), se=se, per_seed=per_seed.tolist())
    if metric == "steps_to_1pct":
        value = steps_to(curves)
        se = float("nan")
        if S > 1:  # bootstrap over seeds; a resample that never reaches 1% counts as T (censored)
            rng = np.random.default_rng(0)
            boots = [steps_to(curves[rng.integers(0, S, S)]) for _ in range(n_boot)]
            se = float(np.std([T if b is None else b for b in boots], ddof=1))
        per_seed = [steps_to(c[None]) for c in curves]
        return dict(value=value, se=se, per_seed=per_seed)
    raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")


def compare(value, se, paper, metric: str):
    """Whether our number agrees with the paper's within 2 standard errors (None: no paper number or no SE).

    ``paper`` is a number, ``"-"`` (never reached 1% / above 95% error), ``("<", x)`` or ``(">", x)``.
    A missing value (never reached 1%) is compared as such; a NaN SE (one seed) gives None."""
    if paper is None:
        return None
    if metric == "steps_to_1pct":
        if paper == NEVER or value is None:
            return (paper == NEVER) == (value is None)
    if se is None or not math.isfinite(se):
        return None
    if paper == NEVER:  # final error above 95%
        return bool(value + 2 * se >= 95.0)
    if isinstance(paper, (tuple, list)):
        op, x = paper
        return bool(value - 2 * se < x) if op == "<" else bool(value + 2 * se > x)
    return bool(abs(value - paper) <= 2 * se)


def paper_text(paper) -> str:
    if paper is None:
        return ""
    if paper == NEVER:
        return "−"
    if isinstance(paper, (tuple, list)):
        return f"{paper[0]} {paper[1]:g}"
    return f"{paper:g}"


def kendall_tau(a: Sequence[str], b: Sequence[str]) -> float:
    """Rank agreement of two orderings of the same items (1 = same order, −1 = reversed)."""
    items = [x for x in a if x in b]
    ra, rb = {x: i for i, x in enumerate(a)}, {x: i for i, x in enumerate(b)}
    pairs = [(x, y) for i, x in enumerate(items) for y in items[i + 1:]]
    if not pairs:
        return float("nan")
    s = sum(np.sign(ra[x] - ra[y]) * np.sign(rb[x] - rb[y]) for x, y in pairs)
    return float(s / len(pairs))


# --------------------------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------------------------
def _is_main_process() -> bool:
    import jax
    return jax.process_index() == 0


def _to_numpy(x):
    import jax
    if isinstance(x, jax.Array) and not x.is_fully_addressable:  # several hosts: gather the seed axis
        from jax.experimental import multihost_utils
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def padded_seeds(seeds: Sequence[int], n_devices: int) -> list:
    """Seeds padded with extra ones to a multiple of the device count, so the seed axis shards evenly
    (the extra seeds' results are dropped)."""
    seeds = list(seeds)
    pad = (-len(seeds)) % n_devices if n_devices > 1 else 0
    return seeds + [max(seeds) + 1 + i for i in range(pad)]


def execute(run: Run, dataset=None, chunk: Optional[int] = None, bar=None) -> tuple[dict, dict]:
    """Train one run over all its seeds (sharded over devices). Returns (curves [S, T] per metric, info)."""
    import jax

    from . import train

    if run.kind == "bandit":
        program = train.make_bandit_program(run.cfg, dataset)
    else:
        program = train.make_token_program(run.cfg)
    n = run.length
    size = train.chunk_plan(n, chunk if chunk else max(1, n // 20))
    seeds = padded_seeds(run.seeds, jax.device_count())
    t0 = time.perf_counter()
    carry = program.init(seeds)
    parts, done, devices = [], 0, 1
    while done < n:
        step = min(size, n - done)
        carry, metrics = program.chunk(carry, done, step, *program.data)
        first = next(iter(metrics.values()))
        devices = len(first.sharding.device_set)
        parts.append({k: _to_numpy(v)[: len(run.seeds)] for k, v in metrics.items() if v.ndim == 2})
        done += step
        if bar is not None:
            bar.update(step)
    curves = {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}
    info = dict(seconds=time.perf_counter() - t0, devices=devices, padded_seeds=len(seeds))
    return curves, info


def _load_cached(path: pathlib.Path, config_hash: str):
    try:
        with np.load(path) as f:
            if str(f["config_hash"]) != config_hash:
                return None
            curves = {k[len("curve_"):]: f[k] for k in f.files if k.startswith("curve_")}
            info = json.loads(str(f["info"]))
            return curves, info
    except Exception:  # missing, truncated or foreign file: train again
        return None


def primary_curve(run: Run) -> str:
    return "test_error" if run.kind == "bandit" else "error"


def run_preset(name: str, budget: str = "smoke", out=None, *, chunk: Optional[int] = None, progress: bool = True,
               dataset=None, command: Optional[str] = None, log=None) -> dict:
    """Train (or resume) every run of a preset and return its summary; with ``out``, write the per-run
    NPZ files, ``summary.json`` and ``figure.html`` there (atomically)."""
    from . import results

    preset = get(name)
    runs, note = preset.runs(budget)
    log = log or (lambda msg: print(msg, file=sys.stderr))
    main = _is_main_process()
    out = pathlib.Path(out) if out is not None else None
    if dataset is None and any(r.kind == "bandit" for r in runs):
        from . import mnist
        dataset = mnist.load()
    all_curves, infos, memo = {}, {}, {}
    t_start = time.perf_counter()
    for i, run in enumerate(runs):
        h = run.config_hash()
        path = out / run.filename if out is not None else None
        source = "an identical run above" if h in memo else (path.name if path is not None else "")
        cached = memo.get(h) or (_load_cached(path, h) if path is not None and path.exists() else None)
        if cached is not None:
            curves, info = cached
            info = dict(info, resumed=True)
            if main:
                log(f"[{name}] {run.key}: found {source} (hash {h}), skipped")
        else:
            bar = None
            if progress and main:
                from tqdm.auto import tqdm
                bar = tqdm(total=run.length, desc=f"{name} {i + 1}/{len(runs)} {run.key}",
                           unit="ep" if run.kind == "token" else "eval", dynamic_ncols=True, file=sys.stderr)
            curves, info = execute(run, dataset, chunk, bar)
            if bar is not None:
                bar.close()
            info = dict(info, resumed=False)
        # a fresh run, or one identical to an earlier run of this preset whose own file is missing or stale
        if path is not None and main and (not info["resumed"] or _load_cached(path, h) is None):
            results.write_npz(path, config_hash=np.array(h), info=np.array(json.dumps(info)),
                              config=np.array(json.dumps(dataclasses.asdict(run.cfg), default=str)),
                              seeds=np.array(run.seeds), **{f"curve_{k}": v for k, v in curves.items()})
        memo[h] = (curves, info)
        all_curves[run.key], infos[run.key] = curves, info
    summary = summarize(preset, budget, note, runs, all_curves, infos, command=command,
                        data_source=getattr(dataset, "source", None))
    summary["wall_seconds"] = time.perf_counter() - t_start
    if out is not None and main:
        results.write_json(out / "summary.json", summary)
        write_figure(out / "figure.html", preset, budget, runs, all_curves)
    return summary


def summarize(preset: Preset, budget: str, note: str, runs, curves: dict, infos: dict, command=None,
              data_source=None) -> dict:
    rows = []
    for run in runs:
        c = curves[run.key][primary_curve(run)]
        for metric in preset.metrics:
            m = measure(c, metric)
            paper = preset.paper(run.label, metric)
            rows.append(dict(key=run.key, method=run.method, labels=run.label, metric=metric,
                             ours=m["value"], se=m["se"], per_seed=m["per_seed"],
                             paper=list(paper) if isinstance(paper, tuple) else paper, paper_text=paper_text(paper),
                             agree=compare(m["value"], m["se"], paper, metric),
                             seeds=list(run.seeds), length=run.length, config_hash=run.config_hash(),
                             seconds=infos[run.key].get("seconds"), devices=infos[run.key].get("devices"),
                             config=dataclasses.asdict(run.cfg)))
    summary = dict(preset=preset.name, title=preset.title, claim=preset.claim, budget=budget, budget_note=note,
                   paper_setting=preset.paper_setting, comparable=budget == "paper", metrics=list(preset.metrics),
                   command=command or f"python -m tpo_core reproduce {preset.name} --budget {budget}",
                   rows=rows, devices=max((i.get("devices") or 1) for i in infos.values()),
                   train_seconds=sum(i.get("seconds") or 0.0 for i in infos.values() if not i.get("resumed")))
    if data_source:
        summary["data_source"] = data_source
    finals = [r for r in rows if r["metric"] in ("final_error", "final_greedy_error")]
    if preset.name == "mnist" and finals:
        ours = [r["method"] for r in sorted(finals, key=lambda r: r["ours"])]
        paper = [r["method"] for r in sorted((r for r in finals if isinstance(r["paper"], (int, float))),
                                             key=lambda r: r["paper"])]
        summary["order"] = dict(ours=ours, paper=paper, kendall_tau=kendall_tau([m for m in ours if m in paper], paper))
    if preset.name == "table3":
        ours = {r.method: curves[r.key]["error"] for r in runs if r.label["H"] == 10 and r.label["setting"] == "P"}
        ours = {m: c for m, c in ours.items() if m in ("tpo", "grpo", "dg")}
        from . import report
        ref = report.default_reference_path()
        if ours and ref.exists():
            summary["reference"] = report.compare_reference(ours, ref)
    return summary


def write_figure(path, preset: Preset, budget: str, runs, curves: dict):
    import plotly.graph_objects as go
    import plotly.io as pio

    from . import plotting, results

    methods = [r.method for r in runs]
    unique = len(set(methods)) == len(methods)
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
               "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"]
    fig = go.Figure()
    for i, run in enumerate(runs):
        c = np.asarray(curves[run.key][primary_curve(run)], float)
        mean, se = plotting.mean_and_se(c)
        xs = (np.arange(1, c.shape[1] + 1) * run.cfg.eval_every) if run.kind == "bandit" else np.arange(c.shape[1])
        colour = plotting.color(run.method) if unique else palette[i % len(palette)]
        fig.add_trace(go.Scatter(x=np.concatenate([xs, xs[::-1]]), y=100 * np.concatenate([mean + se, (mean - se)[::-1]]),
                                 fill="toself", fillcolor=colour, opacity=0.15, line=dict(width=0), hoverinfo="skip",
                                 showlegend=False, legendgroup=run.key))
        fig.add_trace(go.Scatter(x=xs, y=100 * mean, name=run.key, line=dict(color=colour, width=2),
                                 legendgroup=run.key))
    bandit = runs and runs[0].kind == "bandit"
    fig.update_layout(title=f"{preset.title} — budget {budget} (seed mean ± 1 SE)",
                      xaxis_title="step" if bandit else "episode",
                      yaxis_title=("greedy test error" if bandit else "error of the episode's rollouts") + " (%)",
                      template="plotly_white", height=480, legend=dict(orientation="h", y=-0.2))
    html = pio.to_html(fig, include_plotlyjs=True, full_html=True)
    return results.write_text(path, html)


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------
def add_subcommands(sub) -> None:
    p = sub.add_parser("reproduce", help="reproduce a table or ablation of the paper")
    p.add_argument("name", nargs="?", help="preset name (see --list)")
    p.add_argument("--list", action="store_true", help="list the presets and exit")
    p.add_argument("--budget", default="cpu", help="smoke | cpu | paper")
    p.add_argument("--out", default=None, help="results folder (default results/<name>)")
    p.add_argument("--chunk", type=int, default=None, help="episodes per streamed chunk")
    p.add_argument("--distributed", action="store_true",
                   help="call jax.distributed.initialize() first (several hosts, one process each)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_reproduce)
    from . import report
    report.add_subcommand(sub)


def list_text() -> str:
    lines = []
    for p in PRESETS.values():
        lines.append(f"{p.name:12s} {p.title}")
        for b in BUDGETS:
            runs, note = p.runs(b)
            lines.append(f"{'':12s}   {b:5s}: {len(runs)} runs; {note}")
    return "\n".join(lines)


def cmd_reproduce(args) -> int:
    if args.distributed:  # before any JAX computation
        import jax
        jax.distributed.initialize()
    if args.list:
        print(list_text())
        return 0
    if not args.name:
        raise ValueError("name is required (or --list); choose from " + ", ".join(PRESETS))
    get(args.name)
    check_budget(args.budget)
    if args.chunk is not None and args.chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {args.chunk}")
    from . import train
    train.enable_compile_cache()
    out = args.out or f"results/{args.name}"
    command = f"python -m tpo_core reproduce {args.name} --budget {args.budget} --out {out}"
    summary = run_preset(args.name, args.budget, out, chunk=args.chunk, progress=not args.quiet, command=command)
    if _is_main_process():
        from . import report
        print(report.to_markdown([summary]))
        print(f"wrote {out}/summary.json, {out}/figure.html and {len(summary['rows'])} rows")
    return 0
