"""The reproduction presets: one per claim of the paper (arXiv 2604.06159 §3.3–§4 and App. D–E), each a list of runs per
budget.

A :class:`Preset` turns a budget (``smoke`` | ``cpu`` | ``paper``, and for Table 3 ``paper-h10`` /
``paper-h7``) into :class:`Run` s (one configuration, several seeds). A run is *comparable* with the paper
only when its configuration is the one the paper budget trains under the same key (same H, B, K, episodes,
...); seeds may differ. Smaller budgets are never scored against the paper's numbers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import re
import tomllib
from importlib import resources
from typing import Callable, Optional

from tpo_core.config import BanditConfig, TokenConfig
from tpo_core.constants import DENSE_REWARDS, TARGETS
from tpo_core.stream import Family, family

from . import experiments, reference, seedwise, stats
from . import paper_numbers as P

BUDGETS = ("smoke", "cpu", "paper")
SMOKE_MODEL = dict(d_model=16, heads=2, layers=1, ffn=32)
SMOKE_TASK = dict(H=3, B=4, K=4, episodes=6)
# The version of the JAX engine's results: a per-seed file's hash includes it (as the key "engine", which the
# committed run files and summaries use), so a seed trained by another version is never reused; the report
# names the version of every summary (RESULTS_VERSION_TEXT).
RESULTS_VERSION = 2
RESULTS_VERSION_TEXT = {
    1: "engine 1 (trained before the q/k/v attention biases were routed to Muon as in the reference)",
    2: "engine 2",  # the q/k/v attention biases are 2-D and go to Muon, as in the reference
}


@dataclasses.dataclass(frozen=True)
class Run:
    """One configuration of a preset, trained for several seeds."""

    key: str  # unique within the preset, e.g. "tpo H=7 P"
    cfg: object  # TokenConfig | BanditConfig
    seeds: tuple
    labels: tuple = ()  # (("method", "tpo"), ("H", 7), ...): what varies across the preset
    seed_batch: Optional[int] = None  # train and store this many seeds at a time (resumable per seed); None: all

    @property
    def family(self) -> Family:
        """The task family of its config (:func:`tpo_core.stream.family`)."""
        return family(self.cfg)

    @property
    def label(self) -> dict:
        """What varies across the preset, as a dict (``labels`` is the hashable form)."""
        return dict(self.labels)

    @property
    def method(self) -> str:
        """The method its config trains (a key of :data:`tpo_core.methods.REGISTRY`)."""
        return self.cfg.method

    @property
    def length(self) -> int:
        """Points on the curve: episodes, or evaluation blocks for the bandit."""
        return self.cfg.episodes if self.family.is_token else self.cfg.steps // self.cfg.eval_every

    def _blob(self, **extra) -> str:
        return json.dumps(
            dict(kind=self.family.kind, config=dataclasses.asdict(self.cfg), **extra), sort_keys=True, default=str
        )

    def config_hash(self) -> str:
        """Hash of the configuration and the seeds (a whole-run file is valid only for exactly these)."""
        return hashlib.sha256(self._blob(seeds=list(self.seeds)).encode()).hexdigest()[:16]

    def seed_hash(self, seed: int) -> str:
        """Hash of the configuration, one seed and the engine version (a per-seed file)."""
        return hashlib.sha256(self._blob(seed=int(seed), engine=RESULTS_VERSION).encode()).hexdigest()[:16]

    @property
    def stem(self) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "_", self.key).strip("_")

    @property
    def filename(self) -> str:
        return self.stem + ".npz"

    @property
    def primary(self) -> str:
        """The curve the preset is about."""
        return self.family.error_key


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    title: str
    claim: str  # what the paper says, in one or two sentences
    metrics: tuple  # keys of stats.METRICS
    build: Callable  # budget -> (list[Run], note on what the budget changes)
    paper: Callable  # (run label dict, metric) -> the paper's number at exactly that setting
    paper_setting: str  # the paper's setting, for the report
    paper_se: Callable = lambda label, metric: None  # the paper's SE where its seeds are known
    resolution: Callable = lambda label, metric: 10.0 if metric != "steps_to_1pct" else 20.0
    budgets: tuple = BUDGETS
    extras: Optional[Callable] = None  # (preset, runs, curves, rows) -> dict merged into the summary
    paper_data: Optional[Callable] = None  # data source -> whether it is the paper's data (bandit presets)

    def runs(self, budget: str):
        check_budget(budget, self)
        return self.build(budget)

    def paper_configs(self) -> dict:
        """{run key: config} of the paper budget: the settings the paper's numbers belong to."""
        return {r.key: r.cfg for r in self.build("paper")[0]}

    def comparable(self, run: Run, data_source: Optional[str] = None) -> bool:
        """The paper's own setting: its configuration under this key, and (where it matters) its data."""
        same = self.paper_configs().get(run.key) == run.cfg
        return same and (self.paper_data is None or self.paper_data(data_source or ""))

    # ---- the Experiment protocol (tpo_core.lab.reproduce.experiments), but for train: runner.JaxExperiment ----
    def budget_note(self, budget: str) -> str:
        return self.runs(budget)[1]

    def plan(self, budget: str) -> list:
        return self.runs(budget)[0]

    def default_out(self, budget: str) -> pathlib.Path:
        return pathlib.Path(f"results/{self.name}")

    def metric_label(self, metric: str) -> str:
        return stats.METRICS.get(metric, metric)

    def rows(self, summary: dict) -> list[dict]:
        return experiments.labelled_rows(summary, self.metric_label)

    def notes(self, summary: dict) -> str:
        """The results version(s) of the summary's runs (a summary written before versions were recorded: 1)."""
        return "; ".join(RESULTS_VERSION_TEXT.get(v, f"engine {v}") for v in summary.get("engine") or [1])

    def list_text(self) -> str:
        return "\n".join(
            [f"{self.name:12s} {self.title}"]
            + experiments.budget_lines(
                {b: f"{len(runs)} runs; {note}" for b in self.budgets for runs, note in [self.runs(b)]}
            )
        )


def check_budget(budget: str, preset: Optional[Preset] = None) -> str:
    if preset is not None:
        return experiments.check_budget(preset, budget)
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
        kw.update(
            H=SMOKE_TASK["H"],
            B=SMOKE_TASK["B"],
            episodes=SMOKE_TASK["episodes"],
            K=min(kw.get("K", SMOKE_TASK["K"]), SMOKE_TASK["K"]),
        )
    return TokenConfig(**{**base, **kw})


def _steps_resolution(paper):
    return max(20.0, 0.25 * paper) if isinstance(paper, (int, float)) else 20.0


# ---- the registry: each build function below is one preset (@preset); its words are in presets.toml ----------
_TEXT = tomllib.loads(resources.files(__package__).joinpath("presets.toml").read_text(encoding="utf-8"))
_CODE: dict[str, dict] = {}


def preset(name: str, paper: Callable, **options):
    """Register the decorated build function (budget -> (runs, note)) as the preset ``name``, scored against
    ``paper`` ((run label, metric) -> the paper's number); its title, claim, metrics and paper setting are
    presets.toml's ``[name]``; ``options`` are :class:`Preset`'s other fields."""
    if name not in _TEXT:
        raise ValueError(f"preset {name!r} has no entry in presets.toml")

    def register(build: Callable) -> Callable:
        _CODE[name] = dict(build=build, paper=paper, **options)
        return build

    return register


def _lookup(table: dict, *keys: str) -> Callable:
    """(run label, metric) -> ``table``'s entry at the label's ``keys`` (``"metric"``: the metric), or None."""

    def paper(label, metric):
        key = tuple(metric if k == "metric" else label[k] for k in keys)
        return table.get(key[0] if len(key) == 1 else key)

    return paper


def _fixed(delta: float) -> Callable:
    return lambda label, metric: delta


def _steps_or(delta: float, paper: Callable) -> Callable:
    """δ for steps to 1 % from the paper's number (:func:`_steps_resolution`); ``delta`` points for an error."""
    return lambda label, metric: _steps_resolution(paper(label, metric)) if metric == "steps_to_1pct" else delta


# ---- Figure 4: MNIST contextual bandit ------------------------------------------------------
MNIST_METHODS = ("tpo", "pg", "grpo", "dg", "group_pg", "ce")


def _mnist_order(preset, runs, curves, rows) -> dict:
    finals = [r for r in rows if r["metric"] == "final_greedy_error"]
    ours = [r["method"] for r in sorted(finals, key=lambda r: r["ours"])]
    paper = [m for m, _ in sorted(P.MNIST.items(), key=lambda kv: kv[1])]
    return dict(
        order=dict(ours=ours, paper=paper, kendall_tau=stats.kendall_tau([m for m in ours if m in paper], paper))
    )


@preset(
    "mnist",
    _lookup(P.MNIST, "method"),
    resolution=_fixed(1.0),
    extras=_mnist_order,
    paper_data=lambda source: source.startswith("MNIST 60k/10k"),
)
def _mnist_build(budget):
    if budget == "smoke":
        steps, every, seeds, note = 200, 100, _seeds(1), "200 steps, 1 seed (code path only)"
    elif budget == "cpu":
        steps, every, seeds, note = 10_000, 200, _seeds(5), "the paper's 10,000 steps, 5 seeds instead of 20"
    else:
        steps, every, seeds, note = 10_000, 200, _seeds(20), "the paper's setting: 10,000 steps, 20 seeds"
    runs = [
        Run(m, BanditConfig(method=m, steps=steps, eval_every=every), seeds, (("method", m),)) for m in MNIST_METHODS
    ]
    return runs, note


# ---- Table 1: vocabulary sweep, dense bag reward ---------------------------------------------
DENSE_METHODS = P.TABLE1_METHODS


_TABLE1 = _lookup(P.TABLE1, "method", "V")


@preset("table1", _TABLE1, resolution=_steps_or(10.0, _TABLE1))
def _table1_build(budget):
    if budget == "smoke":
        grid, seeds, eps, note = [(m, 2) for m in DENSE_METHODS] + [("tpo_token", 4)], _seeds(1), 6, "tiny"
    elif budget == "cpu":
        grid = [(m, v) for v in (2, 8) for m in DENSE_METHODS]
        seeds, eps, note = _seeds(2), 300, "V ∈ {2, 8}, 2 seeds, 300 episodes (paper: 4 vocabularies, 20 seeds, 1000)"
    else:
        grid = [(m, v) for v in (2, 4, 8, 16) for m in DENSE_METHODS]
        seeds, eps, note = _seeds(20), 1000, "the paper's setting: H=10, K=8, B=100, 20 seeds, 1000 episodes"
    runs = [
        Run(f"{m} V={v}", _token(budget, method=m, reward="bag", V=v, episodes=eps), seeds, (("method", m), ("V", v)))
        for m, v in grid
    ]
    return runs, note


# ---- Table 2: targets × dense rewards ---------------------------------------------------------


_TABLE2 = _lookup(P.TABLE2, "method", "reward", "target")


@preset("table2", _TABLE2, resolution=_steps_or(10.0, _TABLE2))
def _table2_build(budget):
    if budget == "smoke":
        grid = [(m, "bag", "reverse_copy") for m in DENSE_METHODS] + [("tpo_token", "sequential", "reverse_copy")]
        seeds, eps, note = _seeds(1), 6, "tiny"
    elif budget == "cpu":
        grid = [(m, r, t) for r in DENSE_REWARDS for t in ("copy", "reverse_copy") for m in DENSE_METHODS]
        seeds, eps, note = _seeds(2), 300, "targets copy and reverse copy, 2 seeds, 300 episodes (paper: 4, 10, 1000)"
    else:
        grid = [(m, r, t) for r in DENSE_REWARDS for t in TARGETS for m in DENSE_METHODS]
        seeds, eps, note = _seeds(10), 1000, "the paper's setting: H=10, V=2, K=8, 10 seeds, 1000 episodes"
    runs = [
        Run(
            f"{m} {r} {t}",
            _token(budget, method=m, reward=r, target=t, episodes=eps),
            seeds,
            (("method", m), ("reward", r), ("target", t)),
        )
        for m, r, t in grid
    ]
    return runs, note


# ---- Table 3: terminal reward, prompt- and interaction-matched -------------------------------
TABLE3_METHODS = P.TABLE3_METHODS
TABLE3_BUDGETS = BUDGETS + ("paper-h10", "paper-h7")


def _table3_resolution(label, metric):
    """Half the paper's TPO–GRPO gap in the same column (at least 5 points): the effect Table 3 shows."""
    key = (label["H"], label["setting"])
    tpo, grpo = P.TABLE3.get(("tpo",) + key), P.TABLE3.get(("grpo",) + key)
    return max(5.0, abs(grpo - tpo) / 2) if tpo is not None and grpo is not None else 10.0


def _table3_reference(preset, runs, curves, rows) -> dict:
    """Our P, H=10, 2000-episode curves against the reference implementation's own 20 seeds: the comparison of
    means (:func:`reference.compare_reference`) and the seed-by-seed one (:func:`seedwise.h10_comparison`); and
    the paper's claim within ours at H=7 (TPO against GRPO, seed by seed, ``seedwise_h7``: the reference file
    has no H=7 curves)."""

    def column(H):
        return {
            r.method: curves[r.key]["error"]
            for r in runs
            if r.label.get("H") == H
            and r.label.get("setting") == "P"
            and r.length == 2000
            and r.method in ("tpo", "grpo", "dg")
            and preset.comparable(r)
        }

    out = {}
    ours = column(10)
    path = reference.reference_path() if ours else None
    if path is not None:
        ref = {m: c for m, c in reference.load_reference(path).items() if m in ours}
        out.update(reference=reference.compare_reference(ours, path), seedwise=seedwise.h10_comparison(ours, ref))
    h7 = column(7)
    if "tpo" in h7 and "grpo" in h7:
        out["seedwise_h7"] = seedwise.h10_comparison(h7)
    return out


@preset(
    "table3",
    _lookup(P.TABLE3, "method", "H", "setting"),
    paper_se=_lookup(P.TABLE3_SE, "method", "H", "setting"),
    resolution=_table3_resolution,
    budgets=TABLE3_BUDGETS,
    extras=_table3_reference,
)
def _table3_build(budget):
    batch = None
    if budget == "smoke":
        grid = [(m, 3, "P") for m in TABLE3_METHODS] + [("ppo", 3, "I")]
        seeds, eps, note = _seeds(1), 6, "tiny"
    elif budget == "cpu":
        grid = [(m, 6, "P") for m in ("tpo", "grpo", "grpo_no_kl")]
        seeds, eps = _seeds(2), 300
        note = (
            "H=6 prompt-matched only, TPO/GRPO/GRPO-no-KL, 2 seeds, 300 episodes "
            "(paper: H=7..10, P and I, 5 methods, 20 seeds, 2000 episodes; not scored against it)"
        )
    elif budget == "paper-h10":
        grid, seeds, eps, batch = [(m, 10, "P") for m in ("tpo", "grpo")], _seeds(20), 2000, 1
        note = (
            "the paper's setting for its headline column (P, H=10: V=2, K=8, B=100, 4 epochs, 2000 episodes), "
            "TPO and GRPO; trained one seed at a time, resumable (seeds as committed)"
        )
    elif budget == "paper-h7":
        grid = [(m, 7, "P") for m in TABLE3_METHODS] + [(m, 7, "I") for m in ("ppo", "dg")]
        seeds, eps, batch = _seeds(5), 2000, 1
        note = (
            "the paper's H=7 column: TPO, GRPO, GRPO (no KL), PPO and DG prompt-matched, PPO and DG also "
            "interaction-matched (B=800, lr×√8), 2000 episodes; one seed at a time, resumable"
        )
    else:
        grid = [(m, H, s) for s in "PI" for H in (7, 8, 9, 10) for m in TABLE3_METHODS]
        seeds, eps, note = _seeds(20), 2000, "the paper's setting: V=2, K=8, B=100, 20 seeds, 2000 episodes"
    runs = []
    for m, H, s in grid:
        cfg = _token(budget, method=m, reward="terminal", H=H, episodes=eps)
        if s == "I":
            cfg = cfg.interaction_matched()
        runs.append(Run(f"{m} H={H} {s}", cfg, seeds, (("method", m), ("H", H), ("setting", s)), seed_batch=batch))
    return runs, note


# ---- anchor ablation ----------------------------------------------------------------------------
@preset("anchor", _lookup(P.ANCHOR, "method", "H"))
def _anchor_build(budget):
    methods = ("tpo", "tpo_no_anchor", "group_pg")
    if budget == "smoke":
        Hs, seeds, eps, note = (3,), _seeds(1), 6, "tiny"
    elif budget == "cpu":
        Hs, seeds, eps, note = (6,), _seeds(2), 300, "H=6, 2 seeds, 300 episodes (paper: H=7, 8, 10, 2000 episodes)"
    else:
        Hs, seeds, eps, note = (7, 8, 10), _seeds(20), 2000, "the paper's setting: K=8, B=100, 2000 episodes, 20 seeds"
    runs = [
        Run(f"{m} H={H}", _token(budget, method=m, H=H, episodes=eps), seeds, (("method", m), ("H", H)))
        for H in Hs
        for m in methods
    ]
    return runs, note


# ---- ablations at H=8, B=256, K=32 ----------------------------------------------------------------
ABLATION_SEEDS = 10  # the paper does not state the ablations' seed count: 10 assumed


def _ablation_base(budget):
    if budget == "smoke":
        return dict(H=3, B=4, K=4, episodes=6), _seeds(1), "tiny"
    if budget == "cpu":
        return (
            dict(H=5, B=32, K=8, episodes=200),
            _seeds(2),
            "H=5, B=32, 2 seeds, 200 episodes (paper: H=8, B=256, 2000 episodes)",
        )
    return (
        dict(H=8, B=256, K=32, episodes=2000),
        _seeds(ABLATION_SEEDS),
        f"the paper's setting: H=8, B=256, K=32, 2000 episodes; {ABLATION_SEEDS} seeds (count not stated)",
    )


@preset("k_sweep", _lookup(P.K_SWEEP, "method", "K"), resolution=_fixed(2.0))
def _k_build(budget):
    base, seeds, note = _ablation_base(budget)
    grid = {
        "smoke": [("tpo", 2), ("tpo", 4), ("grpo", 2)],
        "cpu": [(m, k) for k in (4, 8, 16) for m in ("tpo", "grpo")],
        "paper": [(m, k) for k in (4, 8, 16, 32, 64) for m in ("tpo", "grpo")],
    }[budget]
    runs = [
        Run(
            f"{m} K={k}",
            _token(budget, method=m, reward="terminal", **{**base, "K": k}),
            seeds,
            (("method", m), ("K", k)),
        )
        for m, k in grid
    ]
    return runs, note + ("; K ∈ {4, 8, 16}" if budget == "cpu" else "")


@preset("epoch_sweep", _lookup(P.EPOCH_SWEEP, "method", "epochs"), resolution=_fixed(2.0))
def _epoch_build(budget):
    base, seeds, note = _ablation_base(budget)
    grid = {
        "smoke": [("tpo", 1), ("tpo", 2), ("grpo", 1)],
        "cpu": [(m, e) for e in (1, 2, 4, 8) for m in ("tpo", "grpo")],
        "paper": [(m, e) for e in (1, 2, 4, 8, 16) for m in ("tpo", "grpo")],
    }[budget]
    runs = [
        Run(
            f"{m} epochs={e}",
            _token(budget, method=m, reward="terminal", epochs=e, **base),
            seeds,
            (("method", m), ("epochs", e)),
        )
        for m, e in grid
    ]
    return runs, note + ("; K=8 (paper 32), epochs ∈ {1, 2, 4, 8}" if budget == "cpu" else "")


@preset("grpo_masked", _lookup(P.MASKED, "method"))
def _masked_build(budget):
    base, seeds, note = _ablation_base(budget)
    runs = [
        Run(m, _token(budget, method=m, reward="terminal", **base), seeds, (("method", m),))
        for m in ("tpo", "grpo", "grpo_masked")
    ]
    return runs, note + ("; K=8 (paper 32)" if budget == "cpu" else "")


# ---- η sweep ---------------------------------------------------------------------------------------
_ETA = _lookup(P.ETA_SWEEP, "metric", "eta")


@preset("eta_sweep", _ETA, resolution=_steps_or(1.0, _ETA))
def _eta_build(budget):
    if budget == "smoke":
        etas, seeds, eps, note = (0.5, 2.0), _seeds(1), 6, "tiny"
    elif budget == "cpu":
        etas, seeds, eps, note = (0.25, 1.0, 4.0), _seeds(2), 300, "η ∈ {0.25, 1, 4}, 2 seeds, 300 episodes"
    else:
        etas, seeds, eps, note = (
            (0.25, 0.5, 1.0, 2.0, 4.0),
            _seeds(10),
            1000,
            "H=10, K=8, B=100, 10 seeds, 1000 episodes",
        )
    note += (
        "; the paper does not state the reward variant: TPO_token with the dense bag reward is assumed; "
        "all η values run as one program (a traced-η sweep)"
    )
    runs = [
        Run(
            f"tpo_token eta={eta:g}",
            _token(budget, method="tpo_token", reward="bag", eta=eta, episodes=eps),
            seeds,
            (("method", "tpo_token"), ("eta", eta)),
        )
        for eta in etas
    ]
    return runs, note


# ---- beyond the paper --------------------------------------------------------------------------------
def _beyond_base(budget):
    if budget == "smoke":
        return dict(H=3, episodes=6), _seeds(1), "tiny"
    if budget == "cpu":
        return dict(H=6, episodes=300), _seeds(2), "H=6, 2 seeds, 300 episodes"
    return dict(H=10, episodes=2000), _seeds(20), "Table 3's setting: H=10, K=8, B=100, 20 seeds, 2000 episodes"


# DAPO and the noise study are scored at Table 3's prompt-matched H=10 column
_H10_DELTA = _table3_resolution(dict(H=10, setting="P"), "final_error")


def _paper_dapo(label, metric):
    """DAPO has no paper number; TPO and GRPO at H=10 are Table 3's prompt-matched column."""
    if label["H"] == 10 and label["method"] in ("tpo", "grpo"):
        return P.TABLE3[(label["method"], 10, "P")]
    return None


@preset("dapo", _paper_dapo, resolution=_fixed(_H10_DELTA))
def _dapo_build(budget):
    base, seeds, note = _beyond_base(budget)
    runs = [
        Run(m, _token(budget, method=m, reward="terminal", **base), seeds, (("method", m), ("H", base["H"])))
        for m in ("tpo", "dapo", "grpo")
    ]
    return runs, note


def dapo_refill_runs(budget: str, seeds: int = 8) -> tuple[list, str]:
    """TPO vs TPO + dynamic-sampling refill (``tpo_refill``, r = 2) at the ``dapo`` preset's setting, per-seed
    runs. Not a registered preset: ``results/dapo_refill/run.py`` drives it and writes its own summary (the
    prompt-matched and rollout-matched comparisons)."""
    base, _, _ = _beyond_base(budget)
    runs = [
        Run(
            m,
            _token(budget, method=m, reward="terminal", **base),
            _seeds(seeds),
            (("method", m), ("H", base["H"])),
            seed_batch=1,
        )
        for m in ("tpo", "tpo_refill")
    ]
    cfg = runs[0].cfg
    return runs, f"H={cfg.H}, V={cfg.V}, B={cfg.B}, K={cfg.K}, {cfg.episodes} episodes, {seeds} seeds"


STD_NOISE = 0.01


def _paper_std_noise(label, metric):
    if label["noise"] == 0 and label["std_floor"] == 1e-6 and label["H"] == 10:
        return P.TABLE3[("tpo", 10, "P")]
    return None


@preset("std_noise", _paper_std_noise, resolution=_fixed(_H10_DELTA))
def _std_noise_build(budget):
    base, seeds, note = _beyond_base(budget)
    grid = [("tpo", 0.0, 1e-6), ("tpo", STD_NOISE, 1e-6), ("tpo", STD_NOISE, 0.1), ("grpo", STD_NOISE, 1e-6)]
    runs = [
        Run(
            f"{m} noise={n:g} floor={f:g}",
            _token(budget, method=m, reward="terminal", reward_noise=n, std_floor=f, **base),
            seeds,
            (("method", m), ("noise", n), ("std_floor", f), ("H", base["H"])),
        )
        for m, n, f in grid
    ]
    return runs, note + f"; Gaussian score noise σ={STD_NOISE} on every candidate's terminal score"


if _CODE.keys() != _TEXT.keys():
    raise RuntimeError(f"presets.toml and the @preset builds disagree on {sorted(_CODE.keys() ^ _TEXT.keys())}")
PRESETS: dict[str, Preset] = {  # in presets.toml's order (the report's)
    name: Preset(name=name, **{k: tuple(v) if k == "metrics" else v for k, v in text.items()}, **_CODE[name])
    for name, text in _TEXT.items()
}


def get(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    return PRESETS[name]


def list_text() -> str:
    """The JAX presets' lines of ``python -m tpo_core reproduce --list``."""
    return "\n".join(p.list_text() for p in PRESETS.values())
