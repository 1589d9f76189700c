"""A sparse-reward LM experiment through the real TRL trainers: TPO (mean and summed log-probs) vs TRL's GRPO.

The miniature of the paper's LLM experiment (Kaddour 2026, arXiv 2604.06159, §3.8; reference code
github.com/JeanKaddour/tpo) at a scale a CPU can repeat over many seeds:

* **model**: a small ``transformers.LlamaForCausalLM`` built here (about 0.2 M parameters at the ``cpu``
  budget) with a word-level tokenizer of 43 tokens (:func:`tokenizer`);
* **task**: Reasoning Gym ``graph_color`` with 6 vertices, 3 colours and edge probability 0.5
  (:data:`SETTING`). The prompt is the edge list, one token per edge (``graph e01 e13 … ans``). The answer is
  one ``vertex:colour`` token per vertex, then EOS. :func:`decode_answer` turns it into the JSON map the
  library expects, and the dataset's own ``score_answer`` scores it. The reward is **binary**: 1 for a
  proper colouring, else 0 (the library's 0.01 for "any JSON" is dropped: no format credit). At this
  setting the best constant answer solves about 18 % of puzzles and a uniformly random colouring about 7 %
  (:func:`baselines`, measured on held-out puzzles and stored in the summary);
* **LM-like length spread**: before the answer a completion may "think": a free prefix of 0–24 filler
  words (:data:`FILLER`), its length skewed towards 0 (``floor(25 U³)``). The summed sequence log-probs of
  a group then spread by several nats, as they do on a real LM, while the mean log-probs barely spread.
  Without this prefix the sum and the mean would rank a group's completions the same way, and the
  experiment could not tell them apart. The within-group spread of both is measured at the start
  (:func:`logprob_spread`) and stored;
* **warm start** (:func:`warm_start`), two supervised phases on (prompt, filler + colouring + EOS). First
  ``pretrain_steps`` on random *greedy* colourings (each vertex avoids its earlier neighbours' colours:
  :func:`sft_colourings` at ρ = 1), which installs the graph-conditioned rule; then ``sft_steps`` at a small
  ρ (``sft_greedy``), mostly random colourings, which suppresses it again. RL starts at about 6 % held-out
  success with the capability latent: the miniature of the paper's setting, where a pretrained LM can colour
  graphs and RL must amplify the rare successes. (A random-colouring warm start alone gave RL nothing to
  amplify: no arm learned in 600 steps, ``results/llm_sparse_coloring_cpu_v1``.) The run is deterministic per
  seed and cached (``$TPO_CACHE_DIR`` or ``~/.cache/tpo_core``, under ``llm_sparse``), so every arm of one seed
  starts from the same weights;
* **arms** (:data:`ARMS`): ``tpo_mean`` (``TargetPOTrainer``, η = 1, length-normalised sequence log-probs),
  ``tpo_sum`` (the same with token-summed log-probs, the paper's §2 as written), both with
  ``tpo_mode="exact"``, and ``grpo``: TRL's own ``GRPOTrainer`` with its defaults. All arms use the same
  prompts, seeds and sampling: temperature 1, top-p 1, no top-k, 8 prompts × K = 16 completions per step, one
  optimizer step per generation (``steps_per_generation=1``, ``num_iterations=1``; ``--num-iterations 4``
  for the multi-epoch variant), β = 0, AdamW at a constant learning rate;
* **evaluation**: held-out puzzles from another data seed (a graph also in the training pool is dropped),
  scored every ``eval_every`` steps. We report pass@1 at T = 1 (``eval_samples`` samples per puzzle) and
  greedy. Per-step curves come from the trainers' own logs, read by name: reward, zero-variance-group
  fraction, the trainer's ``tpo/*`` diagnostics (TV, H(p_old), …), mean |A| for GRPO, ``grad_norm``,
  token entropy and completion length.

**Fairness protocol.** Stage ``grid``: every arm at each learning rate of ``budget.lrs`` on
``budget.grid_seeds``. Stage ``main``: each arm at its own best rate (:func:`choose_lr`) on ``budget.main_seeds``,
which are seeds the grid never used. The primary metric (:data:`PRIMARY`) is the held-out success at T = 1
averaged over the evaluations after step 0: it measures how fast and how far a run learns, which the final value
alone misses once every arm nears the task's ceiling. :func:`choose_lr` takes the rate with the highest grid mean
of it (a tie goes to the smaller rate). Each pair of arms gets a verdict on the primary metric and on the final
held-out success, per seed, in two ways. The first is
:func:`tpo_core.lab.reproduce.stats.two_sample_verdict`: a bootstrap 95 % CI of the difference against the
resolution δ = :data:`RESOLUTION`, plus a permutation p-value. The second is a two-sided Mann–Whitney rank
test. Both are reported.

Per (arm, lr, seed) a finished run writes ``<arm>_lr<lr>_seed<s>.npz`` (curves) and ``.json`` (its config, wall
time, read-outs) atomically. A finished run with the same config is skipped. A file holding another config
stops the sweep instead of being overwritten. ``summary.json`` and ``figure.html`` are rebuilt from whatever
has finished.

    python -m tpo_core.lab.llm.sparse --budget smoke --out /tmp/sparse --stage all
    python -m tpo_core reproduce llm_sparse_coloring --budget smoke
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
import pathlib
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from .. import atomic_io
from .common import (
    SPECIAL_TOKENS,
    OneLineParser,
    TrlExperiment,
    cli,
    report_row,
    trl_args,
    word_tokenizer,
)

__all__ = [
    "ARMS",
    "BUDGETS",
    "CLAIM",
    "EXPERIMENTS",
    "FILLER",
    "PRESETS",
    "PRIMARY",
    "RESOLUTION",
    "SETTING",
    "Budget",
    "ColoringReward",
    "SparseExperiment",
    "answer_text",
    "baselines",
    "choose_lr",
    "decode_answer",
    "evaluate",
    "figure",
    "figure_html",
    "heldout_puzzles",
    "logprob_spread",
    "main",
    "make_model",
    "make_puzzles",
    "prompt_text",
    "proper_matrix",
    "run",
    "run_preset",
    "sample_filler_lengths",
    "score_text",
    "sft_colourings",
    "summarize",
    "tokenizer",
    "warm_start",
]

ARMS = ("tpo_mean", "tpo_sum", "grpo")
STAGES = ("grid", "main", "all")
N_VERTICES, N_COLORS, EDGE_P = 6, 3, 0.5
SETTING = dict(num_colors=N_COLORS, min_num_vertices=N_VERTICES, max_num_vertices=N_VERTICES, edge_probability=EDGE_P)
TRAIN_DATA_SEED = 0  # Reasoning Gym seeds entry i with Random(seed + i): far-apart seeds never share
EVAL_DATA_SEED = 10_000_000  # an entry (the graphs may still coincide: those are dropped, heldout_puzzles)
FILLER = ("hm", "so", "ok", "um")  # the free "thinking" prefix
MAX_FILLER = 24
RESOLUTION = 0.05  # δ of the arm-vs-arm verdicts, in held-out success
PRESETS = {"llm_sparse_coloring": "graph colouring, 6 vertices, 3 colours, p = 0.5, binary reward"}
CLAIM = "GRPO collapses on graph colouring while TPO reaches about 0.96 (Kaddour 2026, §3.8, App. G; verl, Qwen3-1.7B)"

EDGE_WORDS = [f"e{i}{j}" for i in range(N_VERTICES) for j in range(i + 1, N_VERTICES)]
ANSWER_WORDS = [f"{v}:{c}" for v in range(N_VERTICES) for c in range(1, N_COLORS + 1)]
SPECIALS = list(SPECIAL_TOKENS)
VOCAB = SPECIALS + ["graph", "ans"] + EDGE_WORDS + list(FILLER) + ANSWER_WORDS


@dataclass(frozen=True)
class Budget:
    steps: int  # optimizer steps of a main-stage run
    grid_steps: int  # optimizer steps of a grid-stage run
    lrs: tuple  # the learning-rate grid (every arm)
    grid_seeds: tuple
    main_seeds: tuple
    prompts_per_step: int = 8
    k: int = 16  # completions per prompt
    num_iterations: int = 1  # optimizer steps per generation (TRL's num_iterations; steps_per_generation = 1)
    max_completion_length: int = 32
    n_train: int = 4096  # the training pool (data seed TRAIN_DATA_SEED)
    n_eval: int = 256  # held-out puzzles (data seed EVAL_DATA_SEED)
    eval_samples: int = 4  # T = 1 samples per held-out puzzle
    eval_every: int = 25
    n_baseline: int = 1000  # held-out puzzles for the constant / random baselines
    d_model: int = 64
    layers: int = 3
    heads: int = 4
    ff: int = 256
    sft_steps: int = 600
    sft_batch: int = 64
    sft_lr: float = 3e-3
    pretrain_lr: float = 3e-3
    sft_greedy: float = 0.0  # ρ: per vertex, the warm-start data avoids earlier neighbours' colours w.p. ρ
    pretrain_steps: int = 0  # supervised steps on random *greedy* colourings (ρ = 1) before the warm start
    spread_prompts: int = 64  # groups of K sampled at the start to measure the log-prob spread
    note: str = ""


BUDGETS = {
    "smoke": Budget(
        steps=2,
        grid_steps=2,
        lrs=(1e-3, 3e-3),
        grid_seeds=(100,),
        main_seeds=(0, 1),
        prompts_per_step=2,
        k=4,
        max_completion_length=32,
        n_train=64,
        n_eval=16,
        eval_samples=2,
        eval_every=1,
        n_baseline=50,
        d_model=32,
        layers=2,
        heads=4,
        ff=64,
        pretrain_steps=10,
        pretrain_lr=1e-2,
        sft_steps=40,
        sft_batch=32,
        sft_lr=1e-2,
        sft_greedy=0.1,
        spread_prompts=4,
        note="a 2-layer d = 32 Llama, 2 steps of 2 prompts x K = 4: seconds; tests and CI only",
    ),
    "cpu": Budget(
        steps=300,
        grid_steps=300,
        lrs=(1e-4, 3e-4, 1e-3, 3e-3),
        grid_seeds=(100, 101),
        main_seeds=tuple(range(8)),
        pretrain_steps=3000,
        pretrain_lr=3e-3,
        sft_steps=600,
        sft_lr=1e-3,
        sft_greedy=0.1,
        note="a 0.2 M-parameter Llama (d 64, 3 layers), 8 prompts x K = 16 per step, 300 steps, held-out "
        "evaluation every 25 steps; lr grid 1e-4, 3e-4, 1e-3, 3e-3 x 2 seeds (3e-3 added before the main "
        "stage because TPO-mean's and GRPO's best sat at the edge, 1e-3), then 8 seeds per arm. Warm "
        "start: 3000 supervised steps on greedy colourings (lr 3e-3), then 600 steps at rho = 0.1 "
        "(lr 1e-3), which suppresses held-out success at T = 1 again, so that RL starts low (the "
        "warm start's success and the training seconds are in the committed summary). 42 runs "
        "plus 10 warm starts. An earlier design (random-colouring warm start only, 600 steps) learned "
        "nothing in any arm: results/llm_sparse_coloring_cpu_v1",
    ),
}
BUDGETS["gpu"] = dataclasses.replace(
    BUDGETS["cpu"],
    lrs=(1e-4, 3e-4, 1e-3),
    main_seeds=tuple(range(16)),
    note="the cpu budget's model, warm start and steps, 16 main seeds, on one GPU; not measured",
)


# ---------------------------------------------------------------------------------------------------------------
# tokens, puzzles, rewards


def tokenizer():
    """The word-level tokenizer of :data:`VOCAB` (left padding, as TRL generates)."""
    return word_tokenizer(VOCAB, join_words=True)


def make_model(seed: int, budget: Budget):
    """A fresh ``LlamaForCausalLM`` of the budget's shape, initialised from ``seed``."""
    import torch
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=len(VOCAB),
        hidden_size=budget.d_model,
        intermediate_size=budget.ff,
        num_hidden_layers=budget.layers,
        num_attention_heads=budget.heads,
        num_key_value_heads=budget.heads,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    return transformers.LlamaForCausalLM(cfg)


def make_puzzles(n: int, seed: int):
    """(Reasoning Gym dataset, its entries) of ``n`` puzzles at :data:`SETTING`; nothing is downloaded."""
    import reasoning_gym

    ds = reasoning_gym.create_dataset("graph_color", size=n, seed=seed, **SETTING)
    return ds, [ds[i] for i in range(n)]


def _graph_key(entry) -> tuple:
    return tuple(sorted(tuple(e) for e in entry["metadata"]["puzzle"]["edges"]))


def heldout_puzzles(n: int, train_entries):
    """(dataset, entries) of ``n`` held-out puzzles from :data:`EVAL_DATA_SEED`, leaving out every graph that is
    also in ``train_entries`` (the 6-vertex graph space is small: 2^15)."""
    seen = {_graph_key(e) for e in train_entries}
    size = n
    while True:
        ds, entries = make_puzzles(size, EVAL_DATA_SEED)
        keep = [e for e in entries if _graph_key(e) not in seen]
        if len(keep) >= n:
            return ds, keep[:n]
        size = int(size * 1.5) + 16


def prompt_text(entry) -> str:
    edges = entry["metadata"]["puzzle"]["edges"]
    return " ".join(["graph", *(f"e{u}{v}" for u, v in edges), "ans"])


def answer_text(colouring, n_filler: int = 0, rng=None) -> str:
    """The completion text: ``n_filler`` filler words drawn uniformly from :data:`FILLER`, then one
    ``vertex:colour`` word per vertex (colours 1..3, vertex order 0..5)."""
    filler = [] if n_filler == 0 else [FILLER[i] for i in rng.integers(0, len(FILLER), n_filler)]
    return " ".join(filler + [f"{v}:{int(c)}" for v, c in enumerate(colouring)])


def decode_answer(text: str) -> str | None:
    """The JSON string the Reasoning Gym verifier reads, from a completion: leading filler words are skipped.
    What follows must be ``vertex:colour`` words only, each becoming ``"vertex": colour`` in order, so a
    repeated vertex keeps its last colour (``json.loads``) and a missing vertex fails verification. Any other
    word makes the completion unparseable (None)."""
    words = text.split()
    i = 0
    while i < len(words) and words[i] in FILLER:
        i += 1
    pairs = []
    for w in words[i:]:
        v, sep, c = w.partition(":")
        if not (sep and v.isdigit() and c.isdigit()):
            return None
        pairs.append(f'"{int(v)}": {int(c)}')
    return "{" + ", ".join(pairs) + "}"


def score_text(dataset, entry, text: str) -> float:
    """Binary reward: 1.0 when the library's ``score_answer`` says the decoded colouring is proper, else 0."""
    return 1.0 if dataset.score_answer(decode_answer(text), entry) >= 1.0 else 0.0


class ColoringReward:
    """A TRL reward function over the training pool; the dataset's ``entry_index`` column names the puzzle.
    Keeps the first and the latest few (completion, reward) pairs for the run's record."""

    __name__ = "coloring"

    def __init__(self, dataset, entries, keep: int = 4):
        self.dataset, self.entries, self.keep, self.first, self.last = dataset, entries, keep, None, None

    def __call__(self, completions, entry_index, **_):
        scores = [
            score_text(self.dataset, self.entries[int(i)], c if isinstance(c, str) else c[-1]["content"])
            for c, i in zip(completions, entry_index)
        ]
        batch = [{"completion": c, "reward": s} for c, s in zip(completions, scores)][: self.keep]
        self.first = self.first or batch
        self.last = batch
        return scores


# ---------------------------------------------------------------------------------------------------------------
# baselines


def _all_colourings() -> np.ndarray:
    grid = np.stack(np.meshgrid(*[np.arange(1, N_COLORS + 1)] * N_VERTICES, indexing="ij"), -1)
    return grid.reshape(-1, N_VERTICES)  # [3^6, 6], lexicographic


def proper_matrix(entries) -> np.ndarray:
    """[3^6, N] bool: colouring c (lexicographic order) is proper on puzzle n."""
    cols = _all_colourings()
    out = np.ones((len(cols), len(entries)), bool)
    for n, e in enumerate(entries):
        for u, v in e["metadata"]["puzzle"]["edges"]:
            out[:, n] &= cols[:, u] != cols[:, v]
    return out


def baselines(entries) -> dict:
    """What needs no learning: the best single constant answer (the fraction of puzzles it solves) and the
    expected success of a uniformly random colouring (exact: the mean fraction of proper colourings)."""
    m = proper_matrix(entries)
    per_answer = m.mean(1)
    best = int(per_answer.argmax())
    return {
        "n_puzzles": len(entries),
        "best_constant": float(per_answer[best]),
        "best_constant_answer": _all_colourings()[best].tolist(),
        "random_colouring": float(m.mean()),
        "mean_edges": float(np.mean([len(e["metadata"]["puzzle"]["edges"]) for e in entries])),
    }


# ---------------------------------------------------------------------------------------------------------------
# warm start


def sample_filler_lengths(rng, n: int) -> np.ndarray:
    """Free-prefix lengths in 0..24, skewed towards 0: floor(25 U³) (P(0) ≈ 0.34, mean ≈ 5.8)."""
    return np.minimum(np.floor((MAX_FILLER + 1) * rng.random(n) ** 3), MAX_FILLER).astype(int)


def sft_colourings(rng, entries, rho: float) -> np.ndarray:
    """[len(entries), N_VERTICES] warm-start colourings. Vertex by vertex in order 0..5: with probability
    ``rho`` a colour drawn uniformly from those no earlier neighbour uses (uniform over all colours when none is
    free), otherwise uniform over all colours. ``rho = 0``: uniformly random colourings; ``rho = 1``: random
    greedy colourings."""
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"sft_greedy must be in [0, 1], got {rho!r}")
    out = rng.integers(1, N_COLORS + 1, (len(entries), N_VERTICES))
    if rho == 0.0:
        return out
    greedy = rng.random((len(entries), N_VERTICES)) < rho
    pick = rng.random((len(entries), N_VERTICES))
    for n, e in enumerate(entries):
        earlier = [[] for _ in range(N_VERTICES)]
        for u, v in e["metadata"]["puzzle"]["edges"]:
            earlier[max(u, v)].append(min(u, v))
        for v in range(N_VERTICES):
            if greedy[n, v]:
                free = [c for c in range(1, N_COLORS + 1) if all(out[n, u] != c for u in earlier[v])]
                if free:
                    out[n, v] = free[int(pick[n, v] * len(free))]
    return out


def cache_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("TPO_CACHE_DIR", pathlib.Path.home() / ".cache" / "tpo_core")) / "llm_sparse"


def _warm_key(budget: Budget) -> dict:
    fields = (
        "d_model",
        "layers",
        "heads",
        "ff",
        "pretrain_steps",
        "pretrain_lr",
        "sft_steps",
        "sft_batch",
        "sft_lr",
        "sft_greedy",
        "n_train",
        "n_eval",
        "eval_samples",
        "max_completion_length",
        "spread_prompts",
        "k",
    )
    return {
        "budget": {f: getattr(budget, f) for f in fields},
        "vocab": VOCAB,
        "setting": SETTING,
        "filler": "floor(25 U^3)",
        "data_seeds": [TRAIN_DATA_SEED, EVAL_DATA_SEED],
        "version": 2,
    }


def _device():
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _encode(tok, texts, add_eos: bool) -> list[list[int]]:
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    return [x + [tok.eos_token_id] for x in ids] if add_eos else ids


def _sft(model, tok, entries, budget: Budget, seed, *, steps: int, rho: float, lr: float) -> list[float]:
    """Next-token cross-entropy on (prompt, filler + colouring + EOS), colourings from
    :func:`sft_colourings` at ``rho``; the prompt is not a target. A fresh AdamW per call."""
    import torch

    rng = np.random.default_rng(seed)
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(steps):
        idx = rng.integers(0, len(entries), budget.sft_batch)
        cols = sft_colourings(rng, [entries[i] for i in idx], rho)
        fill = sample_filler_lengths(rng, budget.sft_batch)
        prompts = _encode(tok, [prompt_text(entries[i]) for i in idx], add_eos=False)
        answers = _encode(tok, [answer_text(c, f, rng) for c, f in zip(cols, fill)], add_eos=True)
        width = max(len(p) + len(a) for p, a in zip(prompts, answers))
        ids = torch.zeros(len(idx), width, dtype=torch.long)
        labels = torch.full_like(ids, -100)
        mask = torch.zeros_like(ids)
        for r, (p, a) in enumerate(zip(prompts, answers)):
            seq = p + a
            ids[r, : len(seq)] = torch.tensor(seq)
            labels[r, len(p) : len(seq)] = torch.tensor(a)
            mask[r, : len(seq)] = 1
        loss = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def _atomic_torch_save(path: pathlib.Path, obj) -> None:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(buf.getvalue())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def warm_start(seed: int, budget: Budget, *, cache=None, quiet: bool = True):
    """(model, meta): the supervised warm start of ``seed`` (greedy pretraining, then the suppressing fine-tune at
    ρ = ``sft_greedy``; random filler prefixes throughout), its
    held-out success and the within-group log-prob spread it starts RL with. Cached by (budget shape, seed):
    the first call trains it (deterministic in ``seed``), later calls load it."""
    import torch

    key = _warm_key(budget)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    folder = pathlib.Path(cache) if cache is not None else cache_dir()
    weights, meta_path = folder / f"warm_{digest}_seed{seed}.pt", folder / f"warm_{digest}_seed{seed}.json"
    model = make_model(seed, budget).to(_device())
    tok = tokenizer()
    if weights.is_file() and meta_path.is_file():
        model.load_state_dict(torch.load(weights, map_location=_device()))
        model.eval()
        return model, json.loads(meta_path.read_text())
    start = time.perf_counter()
    rng_state = torch.get_rng_state()
    ds, entries = make_puzzles(budget.n_train, TRAIN_DATA_SEED)
    eval_ds, eval_entries = heldout_puzzles(budget.n_eval, entries)
    pre_losses = (
        _sft(model, tok, entries, budget, [seed, 1], steps=budget.pretrain_steps, rho=1.0, lr=budget.pretrain_lr)
        if budget.pretrain_steps
        else []
    )
    losses = _sft(model, tok, entries, budget, seed, steps=budget.sft_steps, rho=budget.sft_greedy, lr=budget.sft_lr)
    ev = evaluate(
        model,
        tok,
        eval_ds,
        eval_entries,
        samples=budget.eval_samples,
        max_new_tokens=budget.max_completion_length,
        seed=seed,
    )
    spread = logprob_spread(
        model, tok, entries[: budget.spread_prompts], k=budget.k, max_new_tokens=budget.max_completion_length, seed=seed
    )
    torch.set_rng_state(rng_state)
    meta = {
        "seed": seed,
        "key": key,
        "seconds": time.perf_counter() - start,
        "sft_loss_first": losses[0],
        "sft_loss_last": float(np.mean(losses[-10:])),
        "pretrain_loss_last": float(np.mean(pre_losses[-10:])) if pre_losses else None,
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "heldout": ev,
        "logp_spread": spread,
    }
    _atomic_torch_save(weights, {k: v.detach().cpu() for k, v in model.state_dict().items()})
    atomic_io.write_json(meta_path, meta)
    if not quiet:
        print(
            f"tpo_core.lab.llm.sparse: warm start seed {seed}: held-out success {ev['success_t1']:.3f} (T=1), "
            f"{ev['success_greedy']:.3f} (greedy), valid {ev['valid_t1']:.2f}; within-group std of summed / mean "
            f"log-probs {spread['std_sum_median']:.2f} / {spread['std_mean_median']:.3f} nats "
            f"({meta['seconds']:.0f} s)",
            flush=True,
        )
    return model, meta


# ---------------------------------------------------------------------------------------------------------------
# evaluation


class _KeepRng:
    """Sampling inside a run (held-out evaluation) must not move the training's random streams."""

    def __enter__(self):
        import random

        import torch

        self.state = (
            torch.get_rng_state(),
            random.getstate(),
            np.random.get_state(),
            torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        )

    def __exit__(self, *exc):
        import random

        import torch

        torch.set_rng_state(self.state[0])
        random.setstate(self.state[1])
        np.random.set_state(self.state[2])
        if self.state[3] is not None:
            torch.cuda.set_rng_state_all(self.state[3])


def _generate(model, tok, prompts, *, samples: int, greedy: bool, max_new_tokens: int, chunk: int = 256):
    """(prompt ids [B, P], mask, completion ids [B*samples, C]) in order, left-padded prompts."""
    import torch

    device = next(model.parameters()).device
    outs = []
    for i in range(0, len(prompts), chunk):
        enc = tok(prompts[i : i + chunk], return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        with torch.no_grad():
            sampling = (
                {"do_sample": False}
                if greedy
                else {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "num_return_sequences": samples}
            )
            out = model.generate(
                **enc,
                **sampling,
                max_new_tokens=max_new_tokens,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        outs.append((enc["input_ids"], enc["attention_mask"], out[:, enc["input_ids"].shape[1] :]))
    return outs


def _completion_mask(completion_ids, eos_id: int):
    """1 up to and including the first EOS (as TRL's completion mask)."""
    import torch

    is_eos = completion_ids == eos_id
    first = torch.where(
        is_eos.any(1), is_eos.int().argmax(1), torch.full_like(is_eos[:, 0], completion_ids.shape[1], dtype=torch.long)
    )
    return (torch.arange(completion_ids.shape[1], device=completion_ids.device)[None] <= first[:, None]).int()


def evaluate(model, tok, dataset, entries, *, samples: int, max_new_tokens: int, seed: int = 0) -> dict:
    """Held-out pass@1: at T = 1 (``samples`` per puzzle, averaged) and greedy; ``valid_*`` the fraction the
    library scores above 0 (the decoded JSON parses; a filler-only completion decodes to ``{}`` and counts), and
    ``length_*`` the mean completion length (tokens, EOS included). The global random streams are left as they
    were."""
    import torch

    prompts = [prompt_text(e) for e in entries]
    was_training = model.training
    model.eval()
    result = {}
    with _KeepRng():
        torch.manual_seed(seed)
        for greedy in (False, True):
            scores, valid, lengths, row = [], [], [], 0
            for _, _, comp in _generate(
                model, tok, prompts, samples=samples, greedy=greedy, max_new_tokens=max_new_tokens
            ):
                texts = tok.batch_decode(comp, skip_special_tokens=True)
                lengths += _completion_mask(comp, tok.eos_token_id).sum(1).tolist()
                per = 1 if greedy else samples
                for j, text in enumerate(texts):
                    entry = entries[(row + j) // per]
                    scores.append(score_text(dataset, entry, text))
                    valid.append(dataset.score_answer(decode_answer(text), entry) > 0)
                row += len(texts)
            name = "greedy" if greedy else "t1"
            result[f"success_{name}"] = float(np.mean(scores))
            result[f"valid_{name}"] = float(np.mean(valid))
            result[f"length_{name}"] = float(np.mean(lengths))
    model.train(was_training)
    return result


def logprob_spread(model, tok, entries, *, k: int, max_new_tokens: int, seed: int = 0) -> dict:
    """Sample K completions for each puzzle at T = 1 and measure, per group, the population std of the
    sequence log-probs, token-summed and token-mean (completion tokens, EOS included, as the trainers count).
    Returns the median and quartiles over groups."""
    import torch

    prompts = [prompt_text(e) for e in entries]
    was_training = model.training
    model.eval()
    sums, means = [], []
    with _KeepRng():
        torch.manual_seed(seed)
        for ids, mask, comp in _generate(model, tok, prompts, samples=k, greedy=False, max_new_tokens=max_new_tokens):
            ids, mask = ids.repeat_interleave(k, 0), mask.repeat_interleave(k, 0)
            cmask = _completion_mask(comp, tok.eos_token_id)
            full = torch.cat([ids, comp], 1)
            with torch.no_grad():
                logits = model(input_ids=full, attention_mask=torch.cat([mask, cmask], 1)).logits
            logp = torch.log_softmax(logits[:, ids.shape[1] - 1 : -1].float(), -1).gather(-1, comp[..., None])[..., 0]
            s = (logp * cmask).sum(1)
            sums.append(s.view(-1, k))
            means.append((s / cmask.sum(1)).view(-1, k))
    model.train(was_training)
    std_sum = torch.cat(sums).std(1, unbiased=False).cpu().numpy()
    std_mean = torch.cat(means).std(1, unbiased=False).cpu().numpy()
    return {
        "groups": int(len(std_sum)),
        "k": k,
        "std_sum_median": float(np.median(std_sum)),
        "std_sum_iqr": np.percentile(std_sum, [25, 75]).tolist(),
        "std_mean_median": float(np.median(std_mean)),
        "std_mean_iqr": np.percentile(std_mean, [25, 75]).tolist(),
    }


# ---------------------------------------------------------------------------------------------------------------
# one RL run through TRL

CURVE_KEYS = {
    "reward": "reward",
    "reward_std": "reward_std",
    "zero_variance_frac": "frac_reward_zero_std",
    "entropy": "entropy",
    "completion_length": "completions/mean_length",
    "grad_norm": "grad_norm",
    "loss": "loss",
    "abs_advantage": "grpo/abs_advantage",
}


def _curves(log_history) -> dict:
    """Per optimizer step, by name: :data:`CURVE_KEYS` and every ``tpo/<name>`` the trainer logged (as
    ``tpo_<name>``); a name a trainer does not log is NaN."""
    logs = [e for e in log_history if "loss" in e]
    tpo_keys = sorted({k for e in logs for k in e if k.startswith("tpo/")})
    curves = {name: np.array([float(e.get(key, np.nan)) for e in logs], np.float64) for name, key in CURVE_KEYS.items()}
    for key in tpo_keys:
        curves["tpo_" + key[4:].replace("/", "_")] = np.array([float(e.get(key, np.nan)) for e in logs], np.float64)
    curves["step"] = np.arange(1, len(logs) + 1)
    return curves


def _eval_callback():
    from transformers import TrainerCallback

    class HeldOut(TrainerCallback):
        """Held-out evaluation before the first step and every ``every`` steps (and after the last)."""

        def __init__(self, run):
            self.run, self.rows = run, []

        def _eval(self, model, step, max_steps):
            r = self.run
            ev = evaluate(
                model,
                r["tok"],
                r["eval_ds"],
                r["eval_entries"],
                samples=r["budget"].eval_samples,
                max_new_tokens=r["budget"].max_completion_length,
                seed=r["seed"] * 100_003 + step,
            )
            self.rows.append({"step": step, **ev})
            curves = _curves(r["trainer"].state.log_history) if r.get("trainer") else {}
            atomic_io.write_npz(r["partial"], **curves, **_eval_arrays(self.rows))
            if not r["quiet"]:
                last = curves.get("reward", np.array([]))
                print(
                    f"tpo_core.lab.llm.sparse: {r['label']} step {step}/{max_steps}: held-out {ev['success_t1']:.3f} "
                    f"(T=1) {ev['success_greedy']:.3f} (greedy), length {ev['length_t1']:.1f}, train reward "
                    f"{np.mean(last[-r['budget'].eval_every :]) if len(last) else float('nan'):.3f} "
                    f"({time.perf_counter() - r['start']:.0f} s)",
                    flush=True,
                )

        def on_train_begin(self, args, state, control, model=None, **kw):
            self._eval(model, 0, args.max_steps)

        def on_step_end(self, args, state, control, model=None, **kw):
            step = state.global_step
            if step % self.run["budget"].eval_every == 0 or step == args.max_steps:
                if not self.rows or self.rows[-1]["step"] != step:
                    self._eval(model, step, args.max_steps)

    return HeldOut


def _eval_arrays(rows) -> dict:
    if not rows:
        return {}
    return {"eval_" + k: np.array([r[k] for r in rows], np.float64) for k in rows[0]}


def _run_one(arm: str, lr: float, seed: int, steps: int, budget: Budget, out: pathlib.Path, cache, quiet: bool):
    from datasets import Dataset
    from transformers import PrinterCallback

    start = time.perf_counter()
    model, warm = warm_start(seed, budget, cache=cache, quiet=quiet)
    tok = tokenizer()
    ds, entries = make_puzzles(budget.n_train, TRAIN_DATA_SEED)
    eval_ds, eval_entries = heldout_puzzles(budget.n_eval, entries)
    dataset = Dataset.from_dict({"prompt": [prompt_text(e) for e in entries], "entry_index": list(range(len(entries)))})
    reward = ColoringReward(ds, entries)
    scratch = tempfile.mkdtemp(prefix=f"tpo_sparse_{arm}_seed{seed}_")  # the Trainer's output_dir (saves nothing)
    args, trainer_cls = trl_args(
        arm, budget, scratch, steps=steps, learning_rate=lr, seed=seed, num_iterations=budget.num_iterations
    )
    label = f"{arm} lr {lr:g} seed {seed}"
    run_state = {
        "tok": tok,
        "eval_ds": eval_ds,
        "eval_entries": eval_entries,
        "budget": budget,
        "seed": seed,
        "partial": out / f"{_stem(arm, lr, seed)}.partial.npz",
        "quiet": quiet,
        "label": label,
        "start": start,
    }
    held_out = _eval_callback()(run_state)
    trainer = trainer_cls(
        model=model, reward_funcs=reward, args=args, train_dataset=dataset, processing_class=tok, callbacks=[held_out]
    )
    run_state["trainer"] = trainer
    trainer.remove_callback(PrinterCallback)
    try:
        trainer.train()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    curves = _curves(trainer.state.log_history) | _eval_arrays(held_out.rows)
    seconds = time.perf_counter() - start
    meta = {
        "arm": arm,
        "lr": lr,
        "seed": seed,
        "steps": int(len(curves["step"])),
        "seconds": seconds,
        "seconds_per_step": seconds / max(1, len(curves["step"])),
        "warm_start": {k: warm[k] for k in ("heldout", "logp_spread", "n_parameters")},
        "samples_first_step": reward.first,
        "samples_last_step": reward.last,
        **_readouts(curves),
    }
    return curves, meta


def _readouts(curves) -> dict:
    """Per-run read-outs of the held-out curve (T = 1 unless named greedy): start (step 0, the warm start),
    final (the last evaluation), best, AUC (the primary metric: mean over the evaluations after step 0, i.e. how
    fast and how far a run learns), collapse (best − final ≥ 0.2, the review's rule)."""
    t1, greedy = curves["eval_success_t1"], curves["eval_success_greedy"]
    after = t1[1:] if len(t1) > 1 else t1
    return {
        "start_success": float(t1[0]),
        "final_success": float(t1[-1]),
        "final_greedy_success": float(greedy[-1]),
        "best_success": float(t1.max()),
        "auc_success": float(after.mean()),
        "collapsed": bool(t1.max() - t1[-1] >= 0.2),
        "final_train_reward": float(np.nanmean(curves["reward"][-max(1, len(curves["reward"]) // 10) :])),
    }


# ---------------------------------------------------------------------------------------------------------------
# the sweep


def _stem(arm: str, lr: float, seed: int) -> str:
    return f"{arm}_lr{lr:g}_seed{seed}"


def _common_config(budget: Budget) -> dict:
    shared = {
        k: v
        for k, v in dataclasses.asdict(budget).items()
        if k not in ("steps", "grid_steps", "lrs", "grid_seeds", "main_seeds", "note")
    }
    config = {
        "task": "graph_color",
        "setting": SETTING,
        "reward": "binary (proper colouring)",
        "budget": shared,
        "data_seeds": [TRAIN_DATA_SEED, EVAL_DATA_SEED],
        "eta": 1.0,
        "tpo_mode": "exact",
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "beta": 0.0,
        "steps_per_generation": 1,
        "warm_start": _warm_key(budget),
    }
    return json.loads(json.dumps(config))


def _run_config(budget: Budget, arm: str, lr: float, seed: int, steps: int) -> dict:
    return {"common": _common_config(budget), "arm": arm, "lr": float(lr), "seed": int(seed), "steps": int(steps)}


def _finished(out: pathlib.Path, budget: Budget) -> list[dict]:
    """Every finished run in ``out`` of this budget's common config."""
    common = _common_config(budget)
    runs = []
    for path in sorted(out.glob("*_lr*_seed*.json")):
        meta = json.loads(path.read_text())
        if meta.get("config", {}).get("common") == common and (out / (path.name[:-5] + ".npz")).is_file():
            runs.append(meta)
    return runs


PRIMARY = "auc_success"  # the metric the lr rule and the first verdict use


def choose_lr(grid_runs, arm: str, lrs, metric: str = PRIMARY) -> dict:
    """The rule, fixed before seeing results: per arm, the learning rate with the highest mean of ``metric``
    (default: held-out success at T = 1 averaged over the evaluations after step 0) over the grid seeds; a tie
    goes to the smaller rate. Returns the choice and the table (``complete``: every (lr, seed) of the grid
    finished)."""
    table = {}
    for lr in lrs:
        vals = [r[metric] for r in grid_runs if r["arm"] == arm and math.isclose(r["lr"], lr)]
        table[f"{lr:g}"] = {metric: vals, "n": len(vals), "mean": float(np.mean(vals)) if vals else None}
    done = {k: v for k, v in table.items() if v["mean"] is not None}
    best = None
    if done:
        best = min(done, key=lambda k: (-done[k]["mean"], float(k)))
    lrs_sorted = sorted(float(x) for x in table)
    return {
        "lr": None if best is None else float(best),
        "metric": metric,
        "table": table,
        "at_grid_edge": best is not None and float(best) in (lrs_sorted[0], lrs_sorted[-1]) and len(lrs_sorted) > 2,
    }


def run(
    budget: str = "smoke",
    out=None,
    *,
    stage: str = "grid",
    arms=ARMS,
    seeds=None,
    num_iterations=None,
    cache=None,
    quiet: bool = False,
    train: bool = True,
    command: str | None = None,
    threads: int | None = 1,
) -> dict:
    """Train every (arm, lr, seed) of ``stage`` not already finished in ``out``; return the summary (also
    ``out/summary.json``, with ``out/figure.html``). ``stage``: ``grid`` (every lr of the budget on its grid
    seeds), ``main`` (each arm's chosen lr, :func:`choose_lr`, on the main seeds; needs that arm's grid
    finished), ``all`` (grid, then main). ``seeds`` replaces the stage's seeds; ``train=False`` only
    summarises."""
    if budget not in BUDGETS:
        raise ValueError(f"budget {budget!r} is not one of {', '.join(BUDGETS)}")
    if stage not in STAGES:
        raise ValueError(f"stage {stage!r} is not one of {', '.join(STAGES)}")
    arms = tuple(arms)
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms:
        raise ValueError(f"arms {list(arms)!r}: each must be one of {', '.join(ARMS)}")
    if out is None:
        raise ValueError("out (a results folder) is required")
    b = BUDGETS[budget]
    if num_iterations is not None:
        if not (isinstance(num_iterations, int) and num_iterations >= 1):
            raise ValueError(f"num_iterations must be an integer >= 1, got {num_iterations!r}")
        b = dataclasses.replace(b, num_iterations=num_iterations)
    if seeds is not None:
        seeds = tuple(seeds)
        if not seeds or any(not isinstance(s, int) or s < 0 for s in seeds):
            raise ValueError(f"seeds must be integers >= 0, got {list(seeds)!r}")
    out = pathlib.Path(out)
    if train:
        if threads:
            import torch

            torch.set_num_threads(threads)
        out.mkdir(parents=True, exist_ok=True)
        stages = ("grid", "main") if stage == "all" else (stage,)
        for st in stages:
            if st == "main":
                grid = [r for r in _finished(out, b) if r["steps"] == b.grid_steps and r["seed"] in b.grid_seeds]
                plan = []
                for arm in arms:
                    choice = choose_lr(grid, arm, b.lrs)
                    missing = sum(v["n"] < len(b.grid_seeds) for v in choice["table"].values())
                    if missing:
                        raise ValueError(
                            f"stage main needs the grid of {arm} finished in {out} ({missing} of "
                            f"{len(b.lrs)} learning rates incomplete): run --stage grid first"
                        )
                    plan += [(arm, choice["lr"], s, b.steps) for s in (seeds or b.main_seeds)]
            else:
                plan = [(arm, lr, s, b.grid_steps) for arm in arms for lr in b.lrs for s in (seeds or b.grid_seeds)]
            # seed-major: the first seeds of every arm finish first, so a summary is informative early
            plan.sort(key=lambda p: (p[2], ARMS.index(p[0]), p[1]))
            for arm, lr, seed, steps in plan:
                _train_if_needed(out, b, arm, lr, seed, steps, cache, quiet, stage=st)
    summary = summarize(out, budget, b, command=command, requested=(stage, arms, seeds))
    return summary


def _train_if_needed(out, b, arm, lr, seed, steps, cache, quiet, stage):
    stem = _stem(arm, lr, seed)
    config = _run_config(b, arm, lr, seed, steps)
    meta_path, npz_path = out / f"{stem}.json", out / f"{stem}.npz"
    if meta_path.is_file() and npz_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("config") == config:
            if not quiet:
                print(
                    f"tpo_core.lab.llm.sparse: {arm} lr {lr:g} seed {seed} already done in {out}, skipped", flush=True
                )
            return meta
        raise ValueError(f"{meta_path} holds a run of another configuration; use another --out (not overwritten)")
    curves, meta = _run_one(arm, lr, seed, steps, b, out, cache, quiet)
    meta |= {"config": config, "stage": stage}
    atomic_io.write_npz(npz_path, **curves)
    atomic_io.write_json(meta_path, meta)
    (out / f"{stem}.partial.npz").unlink(missing_ok=True)
    if not quiet:
        print(
            f"tpo_core.lab.llm.sparse: {arm} lr {lr:g} seed {seed}: {meta['steps']} steps in {meta['seconds']:.0f} s "
            f"({meta['seconds_per_step']:.2f} s/step), held-out {meta['start_success']:.3f} -> "
            f"{meta['final_success']:.3f} (T=1), greedy {meta['final_greedy_success']:.3f}",
            flush=True,
        )
    return meta


# ---------------------------------------------------------------------------------------------------------------
# summary, verdicts, figure

SUMMARY_METRICS = {
    "auc_success": "held-out success at T = 1, mean over the evaluations after step 0 (primary)",
    "final_success": "held-out success at T = 1, last evaluation",
    "final_greedy_success": "held-out greedy success, last evaluation",
    "start_success": "held-out success at T = 1 before RL (the warm start)",
}


def _mann_whitney(a, b) -> dict:
    try:
        from scipy.stats import mannwhitneyu
    except ImportError:  # scipy comes with scikit-learn; not a hard dependency
        return {"U": None, "p_value": None, "note": "scipy not installed"}
    res = mannwhitneyu(a, b, alternative="two-sided")
    return {"U": float(res.statistic), "p_value": float(res.pvalue)}


def _verdicts(main_by_arm: dict) -> list[dict]:
    """Each pair of arms on the primary metric (AUC) and on the final success, per seed."""
    from ..reproduce.stats import two_sample_verdict

    out = []
    for metric in (PRIMARY, "final_success"):
        for a, b in (("tpo_mean", "grpo"), ("tpo_sum", "grpo"), ("tpo_mean", "tpo_sum")):
            if a not in main_by_arm or b not in main_by_arm:
                continue
            xa = [r[metric] for r in main_by_arm[a]]
            xb = [r[metric] for r in main_by_arm[b]]
            v = two_sample_verdict(xa, xb, RESOLUTION)
            out.append(
                {
                    "a": a,
                    "b": b,
                    "metric": metric,
                    "n": [len(xa), len(xb)],
                    "mean": [float(np.mean(xa)), float(np.mean(xb))],
                    "median": [float(np.median(xa)), float(np.median(xb))],
                    "two_sample_verdict": v,
                    "mann_whitney": _mann_whitney(xa, xb) if min(len(xa), len(xb)) >= 2 else None,
                }
            )
    return out


def summarize(out, budget: str, b: Budget | None = None, *, command: str | None = None, requested=None) -> dict:
    """``out/summary.json`` and ``out/figure.html`` from the runs finished so far."""
    from ..reproduce.stats import seed_se

    b = b or BUDGETS[budget]
    out = pathlib.Path(out)
    runs = _finished(out, b)
    grid = [r for r in runs if r["steps"] == b.grid_steps and r["seed"] in b.grid_seeds]
    main = [r for r in runs if r["steps"] == b.steps and r["seed"] not in b.grid_seeds]
    choices = {arm: choose_lr(grid, arm, b.lrs) for arm in ARMS if any(r["arm"] == arm for r in grid)}
    main_by_arm = {}
    for arm in ARMS:
        chosen = choices.get(arm, {}).get("lr")
        mine = sorted(
            [r for r in main if r["arm"] == arm and chosen is not None and math.isclose(r["lr"], chosen)],
            key=lambda r: r["seed"],
        )
        if mine:
            main_by_arm[arm] = mine
    rows_from = (
        {arm: runs_ for arm, runs_ in main_by_arm.items()}
        if main_by_arm
        else {
            f"{r['arm']} lr {r['lr']:g} (grid)": [x for x in grid if x["arm"] == r["arm"] and x["lr"] == r["lr"]]
            for r in sorted(grid, key=lambda r: (ARMS.index(r["arm"]), r["lr"]))
        }
    )
    rows = []
    for metric in SUMMARY_METRICS:
        for key, mine in rows_from.items():
            vals = [r[metric] for r in mine]
            se = seed_se(vals)
            seeds, length = sorted(r["seed"] for r in mine), min(r["steps"] for r in mine)
            rows.append(report_row(key, metric, float(np.mean(vals)), se if math.isfinite(se) else None, seeds, length))
    base_ds, base_entries = heldout_puzzles(b.n_baseline, make_puzzles(b.n_train, TRAIN_DATA_SEED)[1])
    warm = {}
    for r in runs:
        warm.setdefault(str(r["seed"]), r["warm_start"])
    spread = [w["logp_spread"] for w in warm.values()]
    main_table = {
        arm: {
            "lr": mine[0]["lr"],
            "seeds": [r["seed"] for r in mine],
            **{
                m: [r[m] for r in mine]
                for m in ("final_success", "final_greedy_success", "auc_success", "best_success", "start_success")
            },
            "collapsed": [r["collapsed"] for r in mine],
        }
        for arm, mine in main_by_arm.items()
    }
    pattern = None
    if "grpo" in main_table and "tpo_mean" in main_table:
        g, t = main_table["grpo"], main_table["tpo_mean"]
        pattern = {
            "rule": "the paper's pattern (review, pre-registered): GRPO's mean final <= 0.3 or most GRPO "
            "seeds collapse (best - final >= 0.2), while TPO-mean's mean final >= 0.8",
            "grpo_low_or_collapsing": bool(np.mean(g["final_success"]) <= 0.3 or np.mean(g["collapsed"]) > 0.5),
            "tpo_mean_high": bool(np.mean(t["final_success"]) >= 0.8),
        }
    stage, arms_req, seeds_req = requested or ("grid", ARMS, None)
    expected_grid = (
        {(a, f"{lr:g}", s) for a in arms_req for lr in b.lrs for s in (seeds_req or b.grid_seeds)}
        if stage in ("grid", "all")
        else set()
    )
    have_grid = {(r["arm"], f"{r['lr']:g}", r["seed"]) for r in grid}
    summary = {
        "preset": "llm_sparse_coloring",
        "budget": budget,
        "kind": "llm",
        "title": "Sparse-reward LM miniature: TPO (mean, sum) vs TRL's GRPO, a small Llama on Reasoning Gym "
        "graph colouring (6 vertices, 3 colours, p = 0.5, binary reward)",
        "claim": CLAIM,
        "paper_setting": "verl, Qwen3-1.7B and DeepSeek-R1-Distill-Qwen-1.5B, 16 prompts x K = 16, AdamW 1e-5; this "
        f"repository runs a {warm and next(iter(warm.values()))['n_parameters'] or '?'}-parameter Llama "
        "trained from scratch through TRL's trainers",
        "budget_note": b.note,
        "command": command or f"python -m tpo_core.lab.llm.sparse --budget {budget} --out {out}",
        "train_seconds": float(sum(r["seconds"] for r in runs)),
        "devices": 1,
        "metrics": list(SUMMARY_METRICS),
        "rows": rows,
        "config": _common_config(b),
        "stages": {
            "grid": {"steps": b.grid_steps, "lrs": list(b.lrs), "seeds": list(b.grid_seeds)},
            "main": {"steps": b.steps, "seeds": list(b.main_seeds)},
        },
        "baselines": baselines(base_entries),
        "warm_start": {s: w["heldout"] for s, w in sorted(warm.items(), key=lambda x: int(x[0]))},
        "logp_spread_start": {
            "per_seed": {s: w["logp_spread"] for s, w in warm.items()},
            "std_sum_median": float(np.median([x["std_sum_median"] for x in spread])) if spread else None,
            "std_mean_median": float(np.median([x["std_mean_median"] for x in spread])) if spread else None,
        },
        "grid": {arm: c["table"] for arm, c in choices.items()},
        "chosen_lr": {arm: c["lr"] for arm, c in choices.items()},
        "chosen_lr_at_grid_edge": {arm: c["at_grid_edge"] for arm, c in choices.items()},
        "chosen_lr_rule": " ".join(choose_lr.__doc__.split(". Returns")[0].split()),
        "main": main_table,
        "resolution": RESOLUTION,
        "verdicts": _verdicts(main_by_arm),
        "paper_pattern": pattern,
        "seconds_per_step": {
            arm: float(np.median([r["seconds_per_step"] for r in runs if r["arm"] == arm]))
            for arm in ARMS
            if any(r["arm"] == arm for r in runs)
        },
        "n_runs": {"grid": len(grid), "main": len(main)},
    }
    if expected_grid - have_grid:
        summary["partial"] = True
    out.mkdir(parents=True, exist_ok=True)
    atomic_io.write_json(out / "summary.json", summary)
    atomic_io.write_text(out / "figure.html", figure_html(out, b))
    return summary


FIGURE_PANELS = (
    ("eval_success_t1", "held-out success, T = 1"),
    ("eval_success_greedy", "held-out success, greedy"),
    ("reward", "training reward"),
    ("zero_variance_frac", "groups with no signal"),
    ("completion_length", "completion length (tokens)"),
    ("tpo_tv", "TV(q, p_old): TPO"),
    ("tpo_entropy_p_old", "H(p_old): TPO"),
    ("abs_advantage", "mean |A|: GRPO"),
    ("grad_norm", "gradient norm"),
    ("entropy", "token entropy"),
)


def _load(out: pathlib.Path, meta) -> dict:
    with np.load(out / f"{_stem(meta['arm'], meta['lr'], meta['seed'])}.npz") as f:
        return {k: f[k] for k in f.files}


def figure(out, b: Budget):
    """Seed mean ± 1 SE of every curve: the main stage per arm when it has runs, else the grid per (arm, lr)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from ..figures import color, se_band
    from ..reproduce.stats import seed_se

    out = pathlib.Path(out)
    runs = _finished(out, b)
    main = [r for r in runs if r["steps"] == b.steps and r["seed"] not in b.grid_seeds]
    chosen = runs if not main else main
    groups: dict = {}
    for r in sorted(chosen, key=lambda r: (ARMS.index(r["arm"]), r["lr"], r["seed"])):
        groups.setdefault((r["arm"], r["lr"]), []).append(_load(out, r))
    fig = make_subplots(rows=2, cols=5, subplot_titles=[t for _, t in FIGURE_PANELS])
    for (arm, lr), curves in groups.items():
        c = color("tpo" if arm.startswith("tpo") else arm)
        dash = {"tpo_sum": "dot"}.get(arm, "solid")
        name = f"{arm} lr {lr:g} ({len(curves)} seed{'s' * (len(curves) > 1)})"
        for n, (key, _) in enumerate(FIGURE_PANELS):
            if not all(key in cv for cv in curves):
                continue
            length = min(len(cv[key]) for cv in curves)
            y = np.stack([cv[key][:length] for cv in curves])
            if not np.isfinite(y).any():
                continue
            x = curves[0]["eval_step"][:length] if key.startswith("eval_") else np.arange(1, length + 1)
            mean = np.nanmean(y, 0)
            se = np.nan_to_num(seed_se(y, axis=0)) if len(y) > 1 else np.zeros_like(mean)
            row, col = n // 5 + 1, n % 5 + 1
            fig.add_trace(se_band(x, mean - se, mean + se, c, name, 0.12), row, col)
            fig.add_trace(
                go.Scatter(x=x, y=mean, name=name, legendgroup=name, showlegend=n == 0, line=dict(color=c, dash=dash)),
                row,
                col,
            )
    stage = "main stage, each arm at its chosen lr" if main else "learning-rate grid"
    fig.update_layout(
        title=f"Sparse-reward graph colouring, small Llama through TRL: {stage}, seed mean ± 1 SE",
        template="plotly_white",
        height=640,
        legend=dict(orientation="h", y=-0.12),
    )
    fig.update_xaxes(title_text="optimizer step")
    return fig


def figure_html(out, b: Budget) -> str:
    import plotly.io as pio

    return pio.to_html(figure(out, b), include_plotlyjs=True, full_html=True)


# ---------------------------------------------------------------------------------------------------------------
# entry points


def run_preset(name, budget, out, command, seeds, methods, partial, quiet) -> dict:
    """``python -m tpo_core reproduce llm_sparse_coloring --budget B`` (arguments checked by
    ``SparseExperiment.train``): both stages (grid, then main), every arm (or ``methods``), ``seeds`` main
    seeds (0..seeds-1; None: the budget's) into ``out``. ``partial``: summarise only."""
    arms = methods
    if partial and not out.is_dir():
        raise ValueError(f"out={str(out)!r} holds no finished run (nothing to summarise)")
    stage_seeds = None if seeds is None else tuple(range(seeds))
    if not partial and stage_seeds is not None:  # the grid keeps its own seeds; --seeds sizes the main stage
        run(budget, out, stage="grid", arms=tuple(arms or ARMS), quiet=quiet, command=command)
        return run(budget, out, stage="main", arms=tuple(arms or ARMS), seeds=stage_seeds, quiet=quiet, command=command)
    return run(budget, out, stage="all", arms=tuple(arms or ARMS), quiet=quiet, train=not partial, command=command)


@dataclass(frozen=True)
class SparseExperiment(TrlExperiment, budget_table=BUDGETS, methods=ARMS, run_preset=run_preset):
    """The sparse-reward miniature as an experiment of the registry
    (:class:`tpo_core.lab.reproduce.experiments.Experiment`): both stages, every arm; ``only`` names arms (:data:`ARMS`),
    so several processes can share one ``out``. Stages, ``--num-iterations`` and the cache folder are this module's
    own command line (``python -m tpo_core.lab.llm.sparse``)."""

    name: str
    what: str
    budgets: tuple = tuple(BUDGETS)
    claim: str = CLAIM

    @property
    def title(self) -> str:
        return f"sparse-reward LM miniature: a small Llama through TRL, TPO-mean / TPO-sum / GRPO on {self.what}"

    def plan(self, budget: str) -> list:
        """The grid (every arm x lr x grid seed), then the main stage (every arm x main seed at the lr the grid
        chooses: None until the grid is done)."""
        b = BUDGETS[budget]
        grid = [
            {"stage": "grid", "arm": a, "lr": lr, "seed": s, "steps": b.grid_steps}
            for a in ARMS
            for lr in b.lrs
            for s in b.grid_seeds
        ]
        return grid + [
            {"stage": "main", "arm": a, "lr": None, "seed": s, "steps": b.steps} for a in ARMS for s in b.main_seeds
        ]

    def metric_label(self, metric: str) -> str:
        return metric  # the report names this experiment's metrics by their keys (SUMMARY_METRICS explains them)

    def budget_line(self, budget: str) -> str:
        b = BUDGETS[budget]
        return (
            f"lr grid {', '.join(f'{x:g}' for x in b.lrs)} x {len(b.grid_seeds)} seeds x {b.grid_steps} steps, "
            f"then {len(b.main_seeds)} seeds x {b.steps} steps; {b.note}"
        )


EXPERIMENTS = {name: SparseExperiment(name, what) for name, what in PRESETS.items()}  # this family's registry part


def _parse_ints(text: str, name: str) -> tuple:
    try:
        values = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise ValueError(f"{name} {text!r} is not a comma-separated list of integers") from None
    if not values or any(v < 0 for v in values):
        raise ValueError(f"{name} {text!r} must list integers >= 0")
    return values


@cli
def main(argv=None) -> None:
    parser = OneLineParser(prog="python -m tpo_core.lab.llm.sparse", description=__doc__.split("\n")[0])
    parser.add_argument("--budget", default="smoke", help=f"one of {', '.join(BUDGETS)}")
    parser.add_argument("--out", required=True)
    parser.add_argument("--stage", default="grid", help="grid | main | all")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, from {','.join(ARMS)}")
    parser.add_argument("--seeds", default=None, help="comma-separated integers (default: the stage's seeds)")
    parser.add_argument("--num-iterations", default=None, help="optimizer steps per generation (default: the budget's)")
    parser.add_argument("--cache-dir", default=None, help="warm-start weights (default $TPO_CACHE_DIR/llm_sparse)")
    parser.add_argument("--summarize", action="store_true", help="train nothing: rewrite summary.json and figure.html")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.budget not in BUDGETS:
        raise ValueError(f"--budget {args.budget!r} is not one of {', '.join(BUDGETS)}")
    if args.stage not in STAGES:
        raise ValueError(f"--stage {args.stage!r} is not one of {', '.join(STAGES)}")
    arms = tuple(a.strip() for a in args.arms.split(",") if a.strip())
    if not arms or any(a not in ARMS for a in arms):
        raise ValueError(f"--arms {args.arms!r}: each must be one of {', '.join(ARMS)}")
    seeds = None if args.seeds is None else _parse_ints(args.seeds, "--seeds")
    iters = None
    if args.num_iterations is not None:
        try:
            iters = int(args.num_iterations)
        except ValueError:
            raise ValueError(f"--num-iterations {args.num_iterations!r} is not an integer") from None
        if iters < 1:
            raise ValueError(f"--num-iterations must be >= 1, got {iters}")
    if args.summarize and not pathlib.Path(args.out).is_dir():
        raise ValueError(f"--out {args.out!r} does not exist (nothing to summarise)")
    command = "python -m tpo_core.lab.llm.sparse " + " ".join(argv if argv is not None else sys.argv[1:])
    run(
        args.budget,
        args.out,
        stage=args.stage,
        arms=arms,
        seeds=seeds,
        num_iterations=iters,
        cache=args.cache_dir,
        quiet=args.quiet,
        train=not args.summarize,
        command=command,
    )


if __name__ == "__main__":
    sys.exit(main())
