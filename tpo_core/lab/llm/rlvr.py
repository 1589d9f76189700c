"""RLVR with a real small LM: TPO (``TargetPOTrainer``) vs TRL's own ``GRPOTrainer`` on Reasoning Gym prompts.

Both methods see the same prompts (one data seed), the same training seeds, the same sampling (temperature 1,
top-p 1, no top-k) and K = 16 completions per prompt, one optimizer step per generation (so GRPO's ratio is 1
and its clip inactive, as TPO's old log-probs are recomputed by the trainer), no KL to a reference (β = 0), Adam
at a constant learning rate. TPO uses the paper's η = 1 and token-summed sequence log-probs (§2);
``tpo_mean`` is the length-normalised variant. GRPO is TRL's default (group-normalised advantages, ``dapo``
token aggregation).

Budgets (:data:`BUDGETS`):

* ``smoke``: a tiny randomly initialised Llama and a word-level tokenizer (no download, seconds; the tests and
  CI). The random model cannot write Reasoning Gym answers in tags, so ``smoke`` scores the raw completion;
  on ``leg_counting`` the library's substring partial credit gives it some signal;
* ``cpu``: SmolLM2-135M-Instruct on a 2-core CPU, 1 seed by default (see the budget's ``note``);
* ``gpu``: SmolLM2-135M-Instruct on one GPU (e.g. a free Colab T4), 3 seeds.

Per (method, seed) the run writes ``<method>_seed<s>.npz`` (per-step curves) and ``.json`` (its config, wall
time, sample completions) atomically; a finished (method, seed) with the same config is skipped, so an
interrupted sweep resumes where it stopped. ``summary.json`` lists every run; ``figure.html`` draws them.

Curves per optimizer step: ``reward`` (mean over completions), ``reward_std``, ``zero_variance_frac``
(groups whose K rewards are equal: no signal for either method), ``entropy`` (the policy's mean token
entropy), ``completion_length``; TPO adds ``tv`` = ½ Σ_i |q_i − p_old,i|, ``entropy_q`` and ``entropy_p_old`` (of the
group softmax: near 0 when one completion's sequence log-prob dominates the group, so q ≈ p_old); GRPO adds
``abs_advantage`` = mean |A_i|. Both log ``grad_norm`` (before clipping); TPO logs the within-group std and range of
the old policy's summed and mean log-probs and of completion length (``logp_sum_std``, ``logp_mean_range``,
``length_std``, ...; group means) and its run file keeps per-completion ℓ_sum, ℓ_mean, length, truncated and reward
of the first and the last step (``completions_first_step``, ``completions_last_step``). Runs written before these
curves existed hold NaN-free files without them; the config is unchanged, so they stay valid.

    python -m tpo_core.lab.llm.rlvr --task graph_coloring --budget smoke --out results/llm_smoke
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pathlib
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, replace

import numpy as np

from .. import atomic_io
from .common import SPECIAL_TOKENS, TrlExperiment, cli, report_row, tiny_llama, trl_args, word_tokenizer

__all__ = [
    "Budget",
    "BUDGETS",
    "METHODS",
    "CURVES",
    "PRESETS",
    "run_rlvr",
    "run_preset",
    "summary_rows",
    "prediction_check",
    "measure_starting_success",
    "load_runs",
    "figure",
    "figure_html",
    "tiny_model_and_tokenizer",
    "main",
    "EXPERIMENTS",
    "RlvrExperiment",
    "paper_claim",
]

METHODS = ("tpo", "grpo", "tpo_mean")
_SPREADS = tuple(f"{x}_{s}" for x in ("logp_sum", "logp_mean", "length") for s in ("std", "range"))
CURVES = (
    "reward",
    "reward_std",
    "zero_variance_frac",
    "entropy",
    "completion_length",
    "tv",
    "entropy_q",
    "entropy_p_old",
    "abs_advantage",
    "loss",
    "grad_norm",
    *_SPREADS,
)
_LOG_KEYS = {
    "reward": "reward",
    "reward_std": "reward_std",
    "zero_variance_frac": "frac_reward_zero_std",
    "entropy": "entropy",
    "completion_length": "completions/mean_length",
    "tv": "tpo/tv",
    "entropy_q": "tpo/entropy_q",
    "entropy_p_old": "tpo/entropy_p_old",
    "abs_advantage": "grpo/abs_advantage",
    "loss": "loss",
    "grad_norm": "grad_norm",
    **{name: f"tpo/{name}" for name in _SPREADS},
}


@dataclass(frozen=True)
class Budget:
    model: str  # "tiny" (random, word-level tokenizer) or "smollm2"
    steps: int  # optimizer steps (one generation each)
    prompts_per_step: int  # prompts per generation; completions per step = prompts_per_step * k
    k: int  # completions per prompt (the group)
    max_completion_length: int
    n_prompts: int  # size of the prompt pool (data seed fixed)
    seeds: tuple = (0,)
    learning_rate: float = 1e-6
    answer_format: str = "lenient"  # see tasks.extract_answer: "tags" (Reasoning Gym's), "lenient", "raw"
    note: str = ""


_CPU = Budget(
    "smollm2",
    steps=20,
    prompts_per_step=1,
    k=16,
    max_completion_length=32,
    n_prompts=64,
    seeds=(0, 1, 2),
    learning_rate=1e-5,
    note="SmolLM2-135M on a CPU, completions of ≤ 32 tokens, one (method, seed) per core; the "
    "seconds each took are in the committed summary (results/<preset>_cpu/summary.json)",
)

BUDGETS = {
    "smoke": Budget(
        "tiny",
        steps=2,
        prompts_per_step=4,
        k=8,
        max_completion_length=6,
        n_prompts=8,
        seeds=(0,),
        learning_rate=5e-3,
        answer_format="raw",
        note="tiny random Llama, word-level tokenizer: seconds; tests only",
    ),
    "cpu": _CPU,
    "gpu": replace(  # the CPU budget with more steps, prompts per step, prompt pool and completion length
        _CPU,
        steps=60,
        prompts_per_step=4,
        max_completion_length=128,
        n_prompts=256,
        note="SmolLM2-135M on one GPU (a free Colab T4, fp32, no vLLM), completions of ≤ 128 tokens; "
        "not measured (no GPU run is committed)",
    ),
}

# ``python -m tpo_core reproduce <name> --budget smoke|cpu|gpu``: the paper's Reasoning Gym tasks (§3.8) at
# the setting this model is trained on (tasks.TASKS[...].default). TPO (summed log-probs) and GRPO by default.
PRESETS = {"llm_graph_coloring": "graph_coloring", "llm_knights_knaves": "knights_knaves"}
PRESET_METHODS = ("tpo", "grpo")
SUMMARY_METRICS = {
    "start_reward": "mean reward at step 1 (the starting policy)",
    "final_reward": "mean reward, last fifth of the steps",
}

_TINY_WORDS = [str(i) for i in range(60)]  # + 4 specials = 64 tokens: numbers only, so the raw
# completion is a list of numbers the verifier can read


def _tiny_prompt(question: str) -> str:
    """The tiny model's prompt (it has no chat template): the puzzle's first 8 words of its word-level vocabulary
    (the puzzle's numbers), or ``0`` when it has none."""
    words = set(_TINY_WORDS)
    return " ".join([w for w in question.replace(".", " ").split() if w in words][:8] or ["0"])


def tiny_model_and_tokenizer(seed: int = 0):
    """A 2-layer Llama (d = 32, vocabulary 64; :func:`common.tiny_llama`) and a word-level tokenizer: the bridge
    tests' smoke model."""
    tokenizer = word_tokenizer([*SPECIAL_TOKENS, *_TINY_WORDS])
    return tiny_llama(seed), tokenizer


class _Recorder:
    """Wraps a reward function; keeps the first and the latest batch of (completion, reward) for the report."""

    def __init__(self, reward, keep: int = 4):
        self.reward, self.keep, self.first, self.last = reward, keep, None, None
        self.__name__ = getattr(reward, "__name__", "reward")

    def __call__(self, completions, **kwargs):
        from .tasks import completion_text

        scores = self.reward(completions, **kwargs)
        batch = [{"completion": completion_text(c), "reward": float(s)} for c, s in zip(completions, scores)][
            : self.keep
        ]
        if self.first is None:
            self.first = batch
        self.last = batch
        return scores


def _curves(log_history) -> dict:
    logs = [e for e in log_history if "loss" in e]
    curves = {name: np.array([float(e.get(key, np.nan)) for e in logs], np.float64) for name, key in _LOG_KEYS.items()}
    curves["step"] = np.arange(1, len(logs) + 1)
    return curves


def _partial_curves_callback():
    from transformers import TrainerCallback

    class PartialCurves(TrainerCallback):
        """Writes the curves so far after every logged step (``<method>_seed<s>.partial.npz``), to watch a long run."""

        def __init__(self, path, label, quiet):
            self.path, self.label, self.quiet, self.start = path, label, quiet, time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kwargs):
            curves = _curves(state.log_history)
            atomic_io.write_npz(self.path, **curves)
            if not self.quiet and len(curves["step"]) and logs and "loss" in logs:
                own = (
                    ("tv", curves["tv"][-1]) if np.isfinite(curves["tv"][-1]) else ("|A|", curves["abs_advantage"][-1])
                )
                print(
                    f"tpo_core.lab.llm.rlvr: {self.label} step {len(curves['step'])}/{args.max_steps}: reward "
                    f"{curves['reward'][-1]:.4f}, zero-variance groups {curves['zero_variance_frac'][-1]:.2f}, "
                    f"{own[0]} {own[1]:.3f} ({time.perf_counter() - self.start:.0f} s)",
                    flush=True,
                )

    return PartialCurves


def _run_one(method, seed, task, setting, budget, steps, out, model_path, quiet):
    from datasets import Dataset
    from transformers import PrinterCallback

    from .tasks import train_prompts

    start = time.perf_counter()
    dataset, reward = train_prompts(
        task,
        budget.n_prompts,
        seed=0,
        setting=setting,  # same prompts for all
        answer_format=budget.answer_format,
    )
    if budget.model == "tiny":
        model, tokenizer = tiny_model_and_tokenizer(seed)
        dataset = Dataset.from_dict(
            {
                "prompt": [_tiny_prompt(e["question"]) for e in reward.entries],
                "entry_index": list(range(len(reward.entries))),
            }
        )
        model_line = "tiny random Llama (2 layers, d=32, vocabulary 64)"
    else:
        from .model import load_smollm2

        loaded = load_smollm2(model_path, quiet=quiet)
        model, tokenizer, model_line = loaded.model, loaded.tokenizer, loaded.message
    reward_fn = _Recorder(reward)
    scratch = tempfile.mkdtemp(prefix=f"tpo_llm_{method}_seed{seed}_")  # the Trainer's output_dir (saves nothing)
    args, trainer_cls = trl_args(method, budget, scratch, steps=steps, learning_rate=budget.learning_rate, seed=seed)
    trainer = trainer_cls(
        model=model, reward_funcs=reward_fn, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.add_callback(
        _partial_curves_callback()(out / f"{method}_seed{seed}.partial.npz", f"{method} seed {seed}", quiet)
    )
    trainer.remove_callback(PrinterCallback)  # the Trainer's raw log dicts; the line above replaces them
    before = [p.detach().clone() for p in model.parameters()]
    try:
        trainer.train()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    moved = max((p.detach() - b).abs().max().item() for p, b in zip(model.parameters(), before))
    curves = _curves(trainer.state.log_history)
    logs = curves["step"]
    seconds = time.perf_counter() - start
    meta = {
        "method": method,
        "seed": seed,
        "model": atomic_io.without_home(model_line),
        "seconds": seconds,
        "steps": len(logs),
        "max_parameter_change": moved,
        "samples_first_step": reward_fn.first,
        "samples_last_step": reward_fn.last,
    }
    if hasattr(trainer, "completion_records"):
        records = trainer.completion_records()
        meta |= {"completions_first_step": records["first"], "completions_last_step": records["last"]}
    return curves, meta


def _config(task, setting, budget, steps):
    from .tasks import TASKS

    # what one (method, seed) run trains: the budget without its default seed list and its note
    trained = {k: v for k, v in dataclasses.asdict(budget).items() if k not in ("seeds", "note")}
    config = {
        "task": task,
        "setting": setting or TASKS[task].default,
        "budget": trained | {"steps": steps},
        "eta": 1.0,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "beta": 0.0,
        "data_seed": 0,
    }
    return json.loads(json.dumps(config))  # as it reads back from the file (tuples -> lists)


def run_rlvr(
    task: str = "graph_coloring",
    budget: str = "smoke",
    out=None,
    *,
    methods=("tpo", "grpo"),
    seeds=None,
    setting: str | None = None,
    steps: int | None = None,
    model_path=None,
    quiet: bool = False,
    train: bool = True,
    preset: str | None = None,
    command: str | None = None,
) -> dict:
    """Train every (method, seed) not already in ``out`` and return the summary (also ``out/summary.json``).

    ``train=False`` trains nothing: the summary of the runs finished so far (another process may still be
    training). The summary holds the report's fields too (``preset``, ``rows`` of start and final reward per
    method, seed mean ± SE), so ``python -m tpo_core report results`` lists it beside the JAX presets."""
    from .tasks import _check

    if budget not in BUDGETS:
        raise ValueError(f"budget={budget!r} is not one of {sorted(BUDGETS)}")
    _check(task, setting)
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise ValueError(f"methods={list(methods)!r}: each must be one of {list(METHODS)}")
    b = BUDGETS[budget]
    steps = b.steps if steps is None else int(steps)
    if steps < 1:
        raise ValueError(f"steps must be ≥ 1, got {steps}")
    seeds = tuple(b.seeds if seeds is None else seeds)
    if not seeds:
        raise ValueError("seeds must not be empty")
    if out is None:
        raise ValueError("out= (a results folder) is required")
    out = pathlib.Path(out)
    config = _config(task, setting, b, steps)
    runs = []
    for method in methods:
        for seed in seeds:
            stem = out / f"{method}_seed{seed}"
            meta_path = stem.with_suffix(".json")
            if not train:
                continue
            if meta_path.is_file() and stem.with_suffix(".npz").is_file():
                meta = json.loads(meta_path.read_text())
                if meta.get("config") == config:
                    if not quiet:
                        print(f"tpo_core.lab.llm.rlvr: {method} seed {seed} already done in {out}, skipped", flush=True)
                    runs.append(meta)
                    continue
            curves, meta = _run_one(method, seed, task, setting, b, steps, out, model_path, quiet)
            meta["config"] = config
            meta["final_reward"] = float(np.nanmean(curves["reward"][-max(1, len(curves["reward"]) // 5) :]))
            atomic_io.write_npz(stem.with_suffix(".npz"), **curves)
            atomic_io.write_json(meta_path, meta)
            stem.with_suffix(".partial.npz").unlink(missing_ok=True)
            if not quiet:
                print(
                    f"tpo_core.lab.llm.rlvr: {method} seed {seed}: {meta['steps']} steps in {meta['seconds']:.0f} s, "
                    f"reward {curves['reward'][0]:.3f} -> {curves['reward'][-1]:.3f}",
                    flush=True,
                )
            runs.append(meta)
    # every finished run in ``out`` with this config (another process may have run other methods or seeds)
    for path in sorted(out.glob("*_seed*.json")):
        meta = json.loads(path.read_text())
        if meta.get("config") == config and (meta["method"], meta["seed"]) not in {
            (r["method"], r["seed"]) for r in runs
        }:
            runs.append(meta)
    runs.sort(key=lambda r: (METHODS.index(r["method"]), r["seed"]))
    summary = {
        "config": config,
        "methods": sorted({r["method"] for r in runs}),
        "seeds": sorted({r["seed"] for r in runs}),
        "budget_note": b.note,
        "runs": [
            {k: r[k] for k in ("method", "seed", "seconds", "steps", "final_reward", "max_parameter_change")}
            for r in runs
        ],
    }
    partial = any((m, s) not in {(r["method"], r["seed"]) for r in runs} for m in methods for s in seeds)
    if not train and not runs:
        raise ValueError(
            f"out={str(out)!r} holds no finished run of {task} at budget {budget!r} (nothing to summarise)"
        )
    summary |= _report_fields(task, budget, config, out, runs, preset, command)
    if partial:  # ``train=False`` while some (method, seed) is still running
        summary["partial"] = True
    atomic_io.write_json(out / "summary.json", summary)
    atomic_io.write_text(out / "figure.html", figure_html(out))
    return summary


def summary_rows(out, runs) -> list[dict]:
    """The report's rows: per method, the reward at step 1 (the starting policy, before any update) and the
    final reward (mean over the last fifth of the steps), each as the seed mean ± SE (:func:`stats.seed_se`)."""
    from ..reproduce.stats import seed_se

    out, rows = pathlib.Path(out), []
    for metric in SUMMARY_METRICS:
        for method in [m for m in METHODS if any(r["method"] == m for r in runs)]:
            mine = [r for r in runs if r["method"] == method]
            if metric == "final_reward":
                values = [r["final_reward"] for r in mine]
            else:
                values = []
                for r in mine:
                    with np.load(out / f"{method}_seed{r['seed']}.npz") as f:
                        values.append(float(f["reward"][0]))
            se = seed_se(values)
            seeds, length = sorted(r["seed"] for r in mine), min(r["steps"] for r in mine)
            rows.append(
                report_row(method, metric, float(np.mean(values)), se if np.isfinite(se) else None, seeds, length)
            )
    return rows


def prediction_check(out, *, tv_threshold: float = 0.3, margin: float = 0.1, falsify_below: float = 0.6) -> dict:
    """The written prediction for the ``tpo_mean`` arm (``results/llm_graph_coloring_cpu/PREDICTION.md``),
    evaluated on the finished runs in ``out``: the median TV(q, p_old) over every step of every ``tpo_mean``
    seed, and per seed whether its final reward is ≥ GRPO's on that seed − ``margin``. ``held`` is True when
    the median TV is ≥ ``tv_threshold`` and at least 2 of 3 seeds (two thirds) keep up; ``falsified`` when at
    least two thirds of the seeds end below ``falsify_below``; None while fewer than 3 seeds are finished."""
    out = pathlib.Path(out)
    finals = {}
    for method in ("tpo_mean", "grpo"):
        for path in sorted(out.glob(f"{method}_seed*.json")):
            meta = json.loads(path.read_text())
            if meta.get("method") == method:
                finals.setdefault(method, {})[meta["seed"]] = float(meta["final_reward"])
    mean, grpo = finals.get("tpo_mean", {}), finals.get("grpo", {})
    seeds = sorted(set(mean) & set(grpo))
    tvs = []
    for seed in seeds:
        with np.load(out / f"tpo_mean_seed{seed}.npz") as f:
            tvs.extend(f["tv"][np.isfinite(f["tv"])].tolist())
    keeps_up = {s: mean[s] >= grpo[s] - margin for s in seeds}
    median_tv = float(np.median(tvs)) if tvs else float("nan")
    done = len(seeds) >= 3
    need = math.ceil(2 * len(seeds) / 3)
    return {
        "seeds": seeds,
        "tpo_mean_final": [mean[s] for s in seeds],
        "grpo_final": [grpo[s] for s in seeds],
        "median_tv": median_tv,
        "keeps_up": [keeps_up[s] for s in seeds],
        "held": (median_tv >= tv_threshold and sum(keeps_up.values()) >= need) if done else None,
        "falsified": (sum(mean[s] < falsify_below for s in seeds) >= need) if done else None,
    }


def _report_fields(task, budget, config, out, runs, preset, command) -> dict:
    from ..reproduce import paper_numbers as P

    setup = P.LLM_SETUP
    preset = preset or next((name for name, t in PRESETS.items() if t == task), f"llm_{task}")
    return {
        "preset": preset,
        "budget": budget,
        "kind": "llm",
        "title": f"LLM RLVR in miniature: TPO vs GRPO on Reasoning Gym {task} ({config['setting']})",
        "claim": paper_claim(task),
        "paper_setting": (
            f"verl, Qwen3-1.7B and DeepSeek-R1-Distill-Qwen-1.5B, AdamW {setup['lr']:g}, {setup['batch_prompts']} "
            f"prompts x K = {setup['K']} per step; this repository runs "
            f"SmolLM2-135M-Instruct through TRL"
        ),
        "command": command or f"python -m tpo_core.lab.llm.rlvr --task {task} --budget {budget} --out {out}",
        "metrics": list(SUMMARY_METRICS),
        "train_seconds": float(sum(r["seconds"] for r in runs)),
        "devices": 1,
        "rows": summary_rows(out, runs) if runs else [],
    }


def paper_claim(task: str) -> str:
    """The paper's claim on ``task`` (:data:`tpo_core.lab.reproduce.paper_numbers.LLM`), with where it stands."""
    from ..reproduce import paper_numbers as P

    return f"{P.LLM.get(task, 'the paper runs no LLM experiment on this task')} (verl; §3.8, App. G)"


def run_preset(name, budget, out, command, seeds, methods, partial, quiet) -> dict:
    """``python -m tpo_core reproduce llm_graph_coloring --budget cpu`` (arguments checked by
    ``RlvrExperiment.train``): :func:`run_rlvr` on the preset's task at its default setting, TPO and GRPO
    (``methods`` to split them across processes), ``seeds`` seeds (None: the budget's) into ``out``.
    ``partial``: summarise the finished runs, train nothing."""
    return run_rlvr(
        PRESETS[name],
        budget,
        out,
        methods=tuple(methods or PRESET_METHODS),
        seeds=None if seeds is None else tuple(range(seeds)),
        quiet=quiet,
        train=not partial,
        preset=name,
        command=command,
    )


@dataclass(frozen=True)
class RlvrExperiment(TrlExperiment, budget_table=BUDGETS, methods=METHODS, run_preset=run_preset):
    """One Reasoning Gym task as an experiment of the registry (:class:`tpo_core.lab.reproduce.experiments.Experiment`):
    TPO and GRPO at the task's default setting, budgets :data:`BUDGETS`; ``only`` names methods (:data:`METHODS`),
    so two processes can share one ``out``."""

    name: str
    task: str
    budgets: tuple = tuple(BUDGETS)

    @property
    def title(self) -> str:
        return f"LLM RLVR in miniature: SmolLM2-135M, TPO vs GRPO on Reasoning Gym {self.task} (PyTorch + TRL)"

    @property
    def claim(self) -> str:
        return paper_claim(self.task)

    def plan(self, budget: str) -> list:
        return [{"method": m, "seed": s} for m in PRESET_METHODS for s in BUDGETS[budget].seeds]

    def metric_label(self, metric: str) -> str:
        return SUMMARY_METRICS.get(metric, metric)

    def budget_line(self, budget: str) -> str:
        x = BUDGETS[budget]
        return f"{x.steps} steps x {x.prompts_per_step} prompt(s) x K = {x.k}, {len(x.seeds)} seed(s); {x.note}"


EXPERIMENTS = {name: RlvrExperiment(name, task) for name, task in PRESETS.items()}  # this family's registry part


FIGURE_PANELS = (
    ("reward", "mean reward"),
    ("zero_variance_frac", "groups with no signal"),
    ("tv", "TV(q, p_old): TPO"),
    ("abs_advantage", "mean |A|: GRPO"),
    ("entropy", "policy token entropy"),
    ("entropy_q", "entropy of q: TPO"),
)


def load_runs(out) -> dict:
    """{method: [curves of each finished seed, in seed order]} from ``out/<method>_seed<s>.npz`` (a run still
    in progress, ``.partial.npz``, is left out); each run's dict also holds its ``seed`` (an int)."""
    by_method: dict[str, list] = {}
    paths = [p for p in pathlib.Path(out).glob("*_seed*.npz") if not p.name.endswith(".partial.npz")]
    for path in sorted(paths, key=lambda p: (p.name.rsplit("_seed", 1)[0], int(p.stem.rsplit("_seed", 1)[1]))):
        with np.load(path) as f:
            by_method.setdefault(path.name.rsplit("_seed", 1)[0], []).append(
                {k: f[k] for k in f.files} | {"seed": int(path.stem.rsplit("_seed", 1)[1])}
            )
    return by_method


def figure_html(out) -> str:
    """:func:`figure` as one self-contained page (plotly.js inlined)."""
    import plotly.io as pio

    return pio.to_html(figure(out), include_plotlyjs=True, full_html=True)


def figure(out):
    """Every finished run in ``out``: per method, each seed as a thin line and the seed mean ± 1 SE as a thick
    line and band, per curve over optimizer steps (a plotly figure; :func:`figure_html` writes it). RL outcomes
    per seed are heavy-tailed, so the seeds are drawn, not only their mean."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from ..figures import color, se_band
    from ..reproduce.stats import seed_se

    out = pathlib.Path(out)
    by_method = load_runs(out)
    fig = make_subplots(rows=2, cols=3, subplot_titles=[t for _, t in FIGURE_PANELS])
    for method, runs in by_method.items():
        steps = min(len(r["reward"]) for r in runs)
        c = color("tpo" if method.startswith("tpo") else method)
        dash = "dot" if method == "tpo_mean" else "solid"
        for n, (key, _) in enumerate(FIGURE_PANELS):
            y = np.stack([r[key][:steps] for r in runs])
            if not np.isfinite(y).any():
                continue
            mean = y.mean(0)
            se = seed_se(y, axis=0) if len(y) > 1 else np.zeros_like(mean)
            x = np.arange(1, steps + 1)
            row, col = n // 3 + 1, n % 3 + 1
            for r, yi in zip(runs, y):
                fig.add_trace(
                    go.Scatter(
                        x=x,
                        y=yi,
                        mode="lines",
                        line=dict(color=c, dash=dash, width=0.8),
                        opacity=0.45,
                        name=f"{method} seed {r['seed']}",
                        legendgroup=method,
                        showlegend=False,
                        hovertemplate=f"{method} seed {r['seed']}: %{{y:.3g}}",
                    ),
                    row,
                    col,
                )
            fig.add_trace(se_band(x, mean - se, mean + se, c, method), row, col)
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=mean,
                    name=f"{method} ({len(runs)} seed{'s' * (len(runs) > 1)})",
                    legendgroup=method,
                    showlegend=n == 0,
                    line=dict(color=c, dash=dash, width=3),
                ),
                row,
                col,
            )
    summary_path = out / "summary.json"
    title = "TPO vs GRPO on a real LM"
    if summary_path.is_file():
        cfg = json.loads(summary_path.read_text())["config"]
        title += (
            f": {cfg['task']} ({cfg['setting']}), K = {cfg['budget']['k']}, thin: each seed, thick: seed mean ± 1 SE"
        )
    fig.update_layout(title=title, template="plotly_white", height=620, legend=dict(orientation="h", y=-0.1))
    fig.update_xaxes(title_text="optimizer step")
    return fig


def measure_starting_success(
    task: str, out, *, settings=None, n_prompts: int = 2, k: int = 8, max_new_tokens: int = 32, model_path=None
) -> list[dict]:
    """The starting SmolLM2's rewards on every setting of ``task`` (:func:`tasks.success_rate`, all answer
    formats), appended setting by setting to ``out/starting_success.json``."""
    from .model import load_smollm2
    from .tasks import TASKS, _check, success_rate

    names = list(TASKS[task].settings) if settings is None else list(settings)
    for name in names:
        _check(task, name)
    path = pathlib.Path(out) / "starting_success.json"
    rows = json.loads(path.read_text()) if path.is_file() else []
    loaded = load_smollm2(model_path)
    for name in names:
        row = success_rate(
            loaded.model, loaded.tokenizer, task, name, n_prompts=n_prompts, k=k, max_new_tokens=max_new_tokens
        )
        rows = [r for r in rows if (r["task"], r["setting"]) != (task, name)] + [row]
        atomic_io.write_json(path, rows)
        print(
            f"tpo_core.lab.llm.rlvr: {task} {name}: success {row['tags']['success']:.3f} (tags) / "
            f"{row['lenient']['success']:.3f} (lenient), mean reward {row['lenient']['mean_reward']:.4f} "
            f"(lenient) over {n_prompts} x {k} samples in {row['seconds']:.0f} s",
            flush=True,
        )
    return rows


@cli
def main(argv=None) -> None:
    from .tasks import TASKS

    parser = argparse.ArgumentParser(prog="python -m tpo_core.lab.llm.rlvr", description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="graph_coloring")
    parser.add_argument("--setting", default=None)
    parser.add_argument("--budget", default="smoke")
    parser.add_argument("--out", required=True)
    parser.add_argument("--methods", default="tpo,grpo", help=f"comma-separated, from {','.join(METHODS)}")
    parser.add_argument("--seeds", default=None, help="comma-separated integers (default: the budget's)")
    parser.add_argument("--steps", default=None, help="optimizer steps (default: the budget's)")
    parser.add_argument("--model-path", default=None, help="a GGUF file or a Hugging Face folder")
    parser.add_argument(
        "--measure-start",
        default=None,
        metavar="N_PROMPTS,K",
        help="instead of training: sample K completions for N_PROMPTS puzzles of every setting of "
        "--task (or --setting) with the starting model, write starting_success.json",
    )
    args = parser.parse_args(argv)
    if args.task not in TASKS:
        raise ValueError(f"--task {args.task!r} is not one of {sorted(TASKS)}")
    if args.budget not in BUDGETS:
        raise ValueError(f"--budget {args.budget!r} is not one of {sorted(BUDGETS)}")
    try:
        seeds = None if args.seeds is None else [int(s) for s in args.seeds.split(",")]
    except ValueError:
        raise ValueError(f"--seeds {args.seeds!r} is not a comma-separated list of integers") from None
    try:
        steps = None if args.steps is None else int(args.steps)
    except ValueError:
        raise ValueError(f"--steps {args.steps!r} is not an integer") from None
    if args.measure_start is not None:
        try:
            n_prompts, k = (int(x) for x in args.measure_start.split(","))
        except ValueError:
            raise ValueError(f"--measure-start {args.measure_start!r} is not N_PROMPTS,K") from None
        if n_prompts < 1 or k < 1:
            raise ValueError(f"--measure-start {args.measure_start!r}: both must be ≥ 1")
        measure_starting_success(
            args.task,
            args.out,
            settings=None if args.setting is None else [args.setting],
            n_prompts=n_prompts,
            k=k,
            model_path=args.model_path,
        )
        return
    methods = tuple(m for m in args.methods.split(",") if m)
    run_rlvr(
        args.task,
        args.budget,
        args.out,
        methods=methods,
        seeds=seeds,
        setting=args.setting,
        steps=steps,
        model_path=args.model_path,
    )


if __name__ == "__main__":
    sys.exit(main())
