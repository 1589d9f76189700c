"""Why TPO with summed log-probs barely moves its target on a real LM: the within-group spread of sequence
log-probs of the *starting* SmolLM2-135M-Instruct, measured without training.

For each setting (a Reasoning Gym graph-colouring difficulty, :data:`tasks.TASKS`), ``groups`` puzzles x K
completions are sampled exactly as :mod:`tpo_core.lab.llm.rlvr`'s ``cpu`` budget samples them through TRL: the chat
prompt of :func:`tasks.train_prompts` (data seed 0, a pool of 64 puzzles, the first ``groups`` used), HF
``generate`` at temperature 1, top-p 1, top-k 0 (off), repetition penalty 1, at most 32 new tokens, the model's
and the tokenizer's end-of-turn ids as EOS; the completion mask runs up to and including the first EOS (TRL's);
the reward is the task's verifier on the decoded completion (``skip_special_tokens``, answer format
``"lenient"``).

Per completion, a no-grad forward of the same model gives the token log-probs (float64 ``log_softmax`` of the
fp32 logits), hence ``l_sum`` (Σ over the mask: the paper's sequence log-prob, :func:`torch_ops.sequence_logp`
``"sum"``), ``l_mean`` (``l_sum / length``: the author's later TRL default), the ``length`` (EOS included) and
``truncated`` (no EOS within the cap). Per group, for score ∈ {sum, mean} and η ∈ {1, 0.3, 0.1}, in float64 with
the bridge's own ops (:func:`torch_ops.tpo_target` for q; p_old = softmax over the group of the score, as
:func:`torch_ops.tpo_diagnostics`): H(p_old), TV(q, p_old), KL(q‖p_old), the mass p_old and q put on the
successes (reward ≥ 1) against the sample success rate (and on the group's better reward class, reward above
the group's minimum, against its share: the only signal where nothing succeeds), and the within-group std
(ddof 0) and range of ``l_sum``, ``l_mean`` and ``length``. Per completion also GRPO's |A| (TRL: group z-score with Bessel's std
+ 1e-4), to draw |p_i − q_i| against |A_i|.

Files in ``out``: ``spread.json`` (per setting: config, model line, wall time, per completion and per group
records, the shortcuts a constant answer and a random colouring give on the same puzzles), ``summary.json``
(quantiles per setting x score x η), ``figure.html`` (:func:`figure`). A finished setting with the same config is
skipped; the setting in progress keeps its finished groups in ``spread.partial.json`` and resumes there.

    python -m tpo_core.lab.llm.spread --out results/llm_spread [--groups 16 --k 16 --settings v3,v6p5]
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import pathlib
import sys
import time

import numpy as np

from .. import atomic_io
from ..reproduce import experiments
from .common import OneLineParser, RegistryEntry, cli, report_row

__all__ = [
    "CLAIM",
    "DEFAULT_SETTINGS",
    "ETAS",
    "EXPERIMENTS",
    "QUANTILES",
    "SCORES",
    "SpreadExperiment",
    "completion_mask",
    "figure",
    "figure_html",
    "group_record",
    "grpo_abs_advantage",
    "main",
    "measure_setting",
    "run_spread",
    "sequence_scores",
    "shortcuts",
    "summarize",
    "token_logps",
]

SCORES = ("sum", "mean")
ETAS = (1.0, 0.3, 0.1)
DEFAULT_SETTINGS = ("v3", "v6p5")
QUANTILES = (10, 25, 50, 75, 90)
GRPO_STD_EPS = 1e-4  # TRL's ``(std + 1e-4)`` in group-scaled advantages
SUCCESS = 1.0  # a reward ≥ this is a success (graph colouring: 1 proper, 0.01 any JSON, 0)
MODELS = ("smollm2", "tiny")
SPREAD, PARTIAL, SUMMARY, FIGURE = "spread.json", "spread.partial.json", "summary.json", "figure.html"
CLAIM = (
    "The paper's TPO target q ∝ p_old·e^{u/η} over the K completions of a prompt, with p_old the group softmax of "
    "the sequence log-probs (§2); the paper runs no such measurement"
)


def _eta_key(eta: float) -> str:
    return f"{eta:g}"


# ----------------------------------------------------------------------------------------------------------------
# per completion
# ----------------------------------------------------------------------------------------------------------------
def completion_mask(completion_ids, eos_ids):
    """TRL's completion mask ``[K, T]`` (int): 1 up to and including the first EOS, all ones without one; and
    ``truncated`` ``[K]`` (bool): no EOS in the row (the cap was hit)."""
    import torch

    is_eos = torch.isin(completion_ids, torch.as_tensor(list(eos_ids), device=completion_ids.device))
    eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long, device=completion_ids.device)
    has = is_eos.any(dim=1)
    eos_idx[has] = is_eos.int().argmax(dim=1)[has]
    idx = torch.arange(is_eos.size(1), device=completion_ids.device).expand(is_eos.size(0), -1)
    return (idx <= eos_idx.unsqueeze(1)).int(), ~has


def token_logps(model, prompt_ids, completion_ids, mask):
    """Per-token log-probs ``[K, T]`` (float64) of ``completion_ids`` after ``prompt_ids`` ``[K, P]`` (no
    padding inside the prompt), one no-grad forward; the attention mask is the prompt's ones and ``mask`` (as TRL)."""
    import torch

    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([torch.ones_like(prompt_ids), mask.to(prompt_ids.dtype)], dim=1)
    t = completion_ids.size(1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention, logits_to_keep=t + 1).logits[:, :-1]
        logp = torch.log_softmax(logits.double(), dim=-1)  # temperature 1
    return logp.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)


def sequence_scores(token_logp, mask) -> dict:
    """``l_sum``, ``l_mean`` (the bridge's :func:`torch_ops.sequence_logp`) and ``length`` per row, float64 numpy."""
    from tpo_core.bridge.torch_ops import sequence_logp

    m = mask.to(token_logp.dtype)
    return {
        "l_sum": sequence_logp(token_logp, m, "sum").numpy(),
        "l_mean": sequence_logp(token_logp, m, "mean").numpy(),
        "length": m.sum(-1).numpy().astype(np.int64),
    }


def grpo_abs_advantage(rewards) -> np.ndarray:
    """|A_i| of TRL's ``scale_rewards="group"``: (r − mean) / (std with Bessel's correction + 1e-4)."""
    r = np.asarray(rewards, np.float64)
    return np.abs(r - r.mean()) / (r.std(ddof=1) + GRPO_STD_EPS)


# ----------------------------------------------------------------------------------------------------------------
# per group
# ----------------------------------------------------------------------------------------------------------------
def _spread(x) -> dict:
    x = np.asarray(x, np.float64)
    return {"std": float(x.std()), "range": float(x.max() - x.min())}


def group_record(l_sum, l_mean, length, rewards, *, etas=ETAS) -> tuple[dict, dict]:
    """The group's diagnostics and, per completion, p_old and q: ``(group, {"p_old": {score: [K]},
    "q": {score: {eta: [K]}}})``. Float64 throughout; q from :func:`torch_ops.tpo_target`."""
    import torch

    from tpo_core.bridge.torch_ops import tpo_target

    r = np.asarray(rewards, np.float64)
    success = r >= SUCCESS
    better = r > r.min() + 1e-12  # the group's better class (e.g. the 0.01 JSON credit when nothing succeeds)
    group = {
        "k": int(r.size),
        "n_success": int(success.sum()),
        "success_rate": float(success.mean()),
        "mean_reward": float(r.mean()),
        "zero_variance": bool(r.std() <= 1e-6),
        "frac_above_min": float(better.mean()),
        "frac_truncated": None,
        "l_sum": _spread(l_sum),
        "l_mean": _spread(l_mean),
        "length": _spread(length),
        "scores": {},
    }
    per = {"p_old": {}, "q": {}}
    rt = torch.as_tensor(r, dtype=torch.float64)[None]
    for score, ell in (("sum", l_sum), ("mean", l_mean)):
        lt = torch.as_tensor(np.asarray(ell, np.float64), dtype=torch.float64)[None]
        log_p = torch.log_softmax(lt, -1)[0]
        p = log_p.exp()
        entry = {
            "entropy_p_old": float(-(p * log_p).sum()),
            "p_old_mass_success": float(p[torch.as_tensor(success)].sum()),
            "p_old_mass_above_min": float(p[torch.as_tensor(better)].sum()),
            "p_old_max": float(p.max()),
            "eta": {},
        }
        entry["effective_size"] = float(np.exp(entry["entropy_p_old"]))
        per["p_old"][score] = p.numpy()
        per["q"][score] = {}
        for eta in etas:
            q = tpo_target(lt, rt, eta)[0]
            log_q = torch.where(q > 0, torch.log(torch.where(q > 0, q, torch.ones_like(q))), torch.zeros_like(q))
            entry["eta"][_eta_key(eta)] = {
                "tv": float(0.5 * (q - p).abs().sum()),
                "kl_q_p_old": float(torch.where(q > 0, q * (log_q - log_p), torch.zeros_like(q)).sum()),
                "entropy_q": float(-(q * log_q).sum()),
                "q_mass_success": float(q[torch.as_tensor(success)].sum()),
                "q_mass_above_min": float(q[torch.as_tensor(better)].sum()),
            }
            per["q"][score][_eta_key(eta)] = q.numpy()
        group["scores"][score] = entry
    return group, per


# ----------------------------------------------------------------------------------------------------------------
# shortcuts: what a constant answer and a uniformly random colouring solve on the same puzzles
# ----------------------------------------------------------------------------------------------------------------
EXAMPLE_ANSWER = '{"0": 1, "1": 2, "2": 3}'  # Reasoning Gym's graph_color prompt shows this example


def shortcuts(reward, indices) -> dict | None:
    """Graph colouring only (else None): the prompt's example answer's success rate, the best single constant
    colouring's, and a uniformly random colouring's expected success (exact, by enumeration), over ``indices``."""
    entries = [reward.entries[i] for i in indices]
    if not entries or "puzzle" not in entries[0].get("metadata", {}):
        return None
    from reasoning_gym.algorithmic.graph_color import verify_graph_coloring_solution

    example = float(np.mean([reward.dataset.score_answer(EXAMPLE_ANSWER, e) >= SUCCESS for e in entries]))
    puzzles = [e["metadata"]["puzzle"] for e in entries]
    vertices = sorted({v for p in puzzles for v in p["vertices"]})
    colours = sorted({c for p in puzzles for c in p["color_options"]})
    if len(colours) ** len(vertices) > 100_000:
        return {"example_answer": example}
    solved = np.zeros((len(puzzles), len(colours) ** len(vertices)), bool)
    for j, combo in enumerate(itertools.product(colours, repeat=len(vertices))):
        colouring = dict(zip(vertices, combo))
        for i, p in enumerate(puzzles):
            solved[i, j] = verify_graph_coloring_solution(p, {v: colouring[v] for v in p["vertices"]})[0]
    return {
        "example_answer": example,
        "best_constant": float(solved.mean(0).max()),
        "random_colouring": float(solved.mean()),
    }


# ----------------------------------------------------------------------------------------------------------------
# sampling and measuring one setting
# ----------------------------------------------------------------------------------------------------------------
def _eos_ids(model, tokenizer) -> list[int]:
    """TRL's: every eos id the model's generation config declares, and the tokenizer's."""
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    return ids if tokenizer.eos_token_id in ids else [tokenizer.eos_token_id, *ids]


def _generation_config(tokenizer, eos_ids, config):
    from transformers import GenerationConfig

    sampling = {key: config[key] for key in ("max_new_tokens", "temperature", "top_p", "top_k")}
    special = dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=eos_ids)
    return GenerationConfig(
        do_sample=True, min_p=None, repetition_penalty=1.0, disable_compile=True, **sampling, **special
    )


def _prompt_ids(tokenizer, question: str, chat: bool) -> list[int]:
    from .rlvr import _tiny_prompt  # the smoke model's prompt, as rlvr's smoke budget
    from .tasks import chat_prompt

    if chat:  # TRL's _tokenize_prompts: apply_chat_template(add_generation_prompt=True, tokenize=True)
        return list(
            tokenizer.apply_chat_template(
                [chat_prompt(question)], add_generation_prompt=True, tokenize=True, return_dict=True
            )["input_ids"][0]
        )
    return list(tokenizer(text=[_tiny_prompt(question)])["input_ids"][0])


def measure_group(
    model, tokenizer, reward, index: int, config: dict, seed: int, *, chat: bool = True
) -> tuple[dict, list]:
    """Sample K completions for puzzle ``index``, score them, and compute the group record and per-completion rows."""
    import torch

    from .tasks import completion_text

    eos_ids = _eos_ids(model, tokenizer)
    prompt = torch.tensor([_prompt_ids(tokenizer, reward.entries[index]["question"], chat)] * config["k"])
    start = time.perf_counter()
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(
            input_ids=prompt,
            attention_mask=torch.ones_like(prompt),
            generation_config=_generation_config(tokenizer, eos_ids, config),
        )
    sampled = time.perf_counter()
    completion = out[:, prompt.size(1) :]
    mask, truncated = completion_mask(completion, eos_ids)
    texts = tokenizer.batch_decode([c[m.bool()].tolist() for c, m in zip(completion, mask)], skip_special_tokens=True)
    completions = [[{"role": "assistant", "content": t}] for t in texts] if chat else texts  # as TRL hands them
    rewards = [reward.score(completion_text(c), index) for c in completions]
    seq = sequence_scores(token_logps(model, prompt, completion, mask), mask)
    group, per = group_record(seq["l_sum"], seq["l_mean"], seq["length"], rewards, etas=config["etas"])
    group["frac_truncated"] = float(truncated.double().mean())
    group["entry_index"] = int(index)
    group["seed"] = int(seed)
    group["sample_seconds"] = sampled - start
    group["forward_seconds"] = time.perf_counter() - sampled
    abs_adv = grpo_abs_advantage(rewards)
    rows = []
    for i in range(config["k"]):
        rows.append(
            {
                "i": i,
                "l_sum": float(seq["l_sum"][i]),
                "l_mean": float(seq["l_mean"][i]),
                "length": int(seq["length"][i]),
                "truncated": bool(truncated[i]),
                "reward": float(rewards[i]),
                "success": bool(rewards[i] >= SUCCESS),
                "grpo_abs_advantage": float(abs_adv[i]),
                "p_old": {s: float(per["p_old"][s][i]) for s in SCORES},
                "q": {s: {e: float(v[i]) for e, v in per["q"][s].items()} for s in SCORES},
                "text": texts[i],
            }
        )
    return group, rows


def setting_config(
    task: str,
    setting: str,
    *,
    groups: int,
    k: int,
    model: str,
    max_new_tokens: int = 32,
    answer_format: str | None = None,
    seed: int = 0,
) -> dict:
    """What one setting's measurement depends on (compared to skip a finished setting)."""
    from .tasks import TASKS

    answer_format = answer_format or ("lenient" if model == "smollm2" else "raw")
    config = {
        "task": task,
        "setting": setting,
        "setting_kwargs": TASKS[task].settings[setting],
        "groups": groups,
        "k": k,
        "max_new_tokens": max_new_tokens,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "repetition_penalty": 1.0,
        "answer_format": answer_format,
        "data_seed": 0,
        "n_prompts": max(64, groups),
        "sample_seed": seed,
        "model": model,
        "scores": list(SCORES),
        "etas": list(ETAS),
    }
    return json.loads(json.dumps(config))


def measure_setting(model, tokenizer, config: dict, *, out=None, chat: bool = True, quiet: bool = False) -> dict:
    """All groups of one setting; with ``out``, finished groups are kept in ``spread.partial.json`` (and resumed
    from there when its config matches)."""
    from .tasks import train_prompts

    _, reward = train_prompts(
        config["task"],
        config["n_prompts"],
        seed=config["data_seed"],
        setting=config["setting"],
        answer_format=config["answer_format"],
    )
    partial_path = None if out is None else pathlib.Path(out) / PARTIAL
    groups, completions = [], []
    if partial_path is not None and partial_path.is_file():
        try:
            saved = json.loads(partial_path.read_text())
        except json.JSONDecodeError:
            saved = {}
        if saved.get("config") == config:
            groups, completions = saved["groups"], saved["completions"]
            if not quiet:
                print(
                    f"tpo_core.lab.llm.spread: {config['setting']}: resuming after {len(groups)} finished group(s)",
                    flush=True,
                )
    start = time.perf_counter()
    for g in range(len(groups), config["groups"]):
        seed = config["sample_seed"] * 1_000_003 + g
        group, rows = measure_group(model, tokenizer, reward, g, config, seed, chat=chat)
        group["group"] = g
        groups.append(group)
        completions.extend({"group": g, **row} for row in rows)
        if partial_path is not None:
            atomic_io.write_json(partial_path, {"config": config, "groups": groups, "completions": completions})
        if not quiet:
            s = group["scores"]
            print(
                f"tpo_core.lab.llm.spread: {config['setting']} group {g + 1}/{config['groups']}: "
                f"{group['n_success']}/{group['k']} successes, std l_sum {group['l_sum']['std']:.2f} "
                f"l_mean {group['l_mean']['std']:.3f}, TV(eta=1) sum {s['sum']['eta']['1']['tv']:.2e} "
                f"mean {s['mean']['eta']['1']['tv']:.3f} ({group['sample_seconds']:.0f} s sampling, "
                f"{group['forward_seconds']:.1f} s forward)",
                flush=True,
            )
    return {
        "config": config,
        "groups": groups,
        "completions": completions,
        "seconds_this_process": time.perf_counter() - start,
        "seconds": float(sum(g["sample_seconds"] + g["forward_seconds"] for g in groups)),
        "shortcuts": shortcuts(reward, range(config["groups"])),
    }


def _refresh(record: dict) -> bool:
    """Recompute each group's derived fields from its stored completions (l_sum, l_mean, length, reward: what
    was measured); True when something changed. Measured fields (timings, seeds, truncation) are kept."""
    changed = False
    for group in record["groups"]:
        rows = [r for r in record["completions"] if r["group"] == group["group"]]
        again, _ = group_record(
            [r["l_sum"] for r in rows],
            [r["l_mean"] for r in rows],
            [r["length"] for r in rows],
            [r["reward"] for r in rows],
            etas=record["config"]["etas"],
        )
        again = json.loads(json.dumps({k: v for k, v in again.items() if k != "frac_truncated"}))
        if any(group.get(k) != v for k, v in again.items()):
            group.update(again)
            changed = True
    return changed


def _load_model(model: str, model_path, quiet: bool):
    if model == "tiny":
        from .rlvr import tiny_model_and_tokenizer

        m, tok = tiny_model_and_tokenizer(0)
        return m.eval(), tok, "tiny random Llama (2 layers, d=32, vocabulary 64)", False
    from .model import load_smollm2

    loaded = load_smollm2(model_path, quiet=quiet)
    return loaded.model.eval(), loaded.tokenizer, loaded.message, True


def run_spread(
    out,
    *,
    task: str = "graph_coloring",
    settings=DEFAULT_SETTINGS,
    groups: int = 16,
    k: int = 16,
    max_new_tokens: int = 32,
    model: str = "smollm2",
    model_path=None,
    answer_format: str | None = None,
    seed: int = 0,
    quiet: bool = False,
) -> dict:
    """Measure every setting not already in ``out/spread.json`` with this config; write ``spread.json``,
    ``summary.json`` and ``figure.html``; return the summary."""
    from .tasks import ANSWER_FORMATS, _check

    if model not in MODELS:
        raise ValueError(f"model={model!r} is not one of {list(MODELS)}")
    for name, v, low in (("groups", groups, 1), ("k", k, 2), ("max_new_tokens", max_new_tokens, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{name} must be an integer ≥ {low}, got {v!r}")
    if answer_format is not None and answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format={answer_format!r} is not one of {list(ANSWER_FORMATS)}")
    settings = list(settings)
    if not settings:
        raise ValueError("settings must not be empty")
    for s in settings:
        _check(task, s)
    out = pathlib.Path(out)
    path = out / SPREAD
    atomic_io.remove_stale_temps(path)
    atomic_io.remove_stale_temps(out / PARTIAL)
    data = json.loads(path.read_text()) if path.is_file() else {}
    data.setdefault("settings", {})
    loaded = None
    for s in settings:
        config = setting_config(
            task,
            s,
            groups=groups,
            k=k,
            model=model,
            max_new_tokens=max_new_tokens,
            answer_format=answer_format,
            seed=seed,
        )
        key = f"{task}/{s}"
        if data["settings"].get(key, {}).get("config") == config:
            if not quiet:
                print(f"tpo_core.lab.llm.spread: {key} already done in {out}, skipped", flush=True)
            if _refresh(data["settings"][key]):  # derived group fields of an older version of this module
                atomic_io.write_json(path, data)
            continue
        if loaded is None:
            loaded = _load_model(model, model_path, quiet)
        m, tok, line, chat = loaded
        record = measure_setting(m, tok, config, out=out, chat=chat, quiet=quiet)
        record["model"] = atomic_io.without_home(line)
        data["settings"][key] = record
        data["description"] = __doc__.split("\n\n")[0].replace("\n", " ")
        atomic_io.write_json(path, data)
        (out / PARTIAL).unlink(missing_ok=True)
        if not quiet:
            print(f"tpo_core.lab.llm.spread: {key}: {groups} groups x K = {k} in {record['seconds']:.0f} s", flush=True)
    if not data["settings"]:
        raise ValueError(f"nothing measured in {out}")
    summary = summarize(data, out)
    atomic_io.write_json(out / SUMMARY, summary)
    atomic_io.write_text(out / FIGURE, figure_html(out))
    return summary


# ----------------------------------------------------------------------------------------------------------------
# summary
# ----------------------------------------------------------------------------------------------------------------
def _quantiles(x) -> dict | None:
    x = np.asarray([v for v in x if v is not None], np.float64)
    if x.size == 0:
        return None
    return {f"q{q}": float(np.percentile(x, q)) for q in QUANTILES} | {"mean": float(x.mean()), "n": int(x.size)}


REPORT_ROWS = (
    ("tv_eta1", "median TV(q, p_old), η = 1 (groups whose rewards vary)"),
    ("tv_eta0.1", "median TV(q, p_old), η = 0.1 (groups whose rewards vary)"),
    ("entropy_p_old", "median H(p_old) (nats; ln K = uniform)"),
    ("mass_better", "median p_old mass on the group's better reward class (groups whose rewards vary)"),
    ("share_better", "median share of the better reward class in the sample (same groups)"),
    ("std_score", "median within-group std of the score (nats)"),
)


def _report_rows(settings: dict) -> list[dict]:
    """The rows ``python -m tpo_core report`` lists (no paper number: a diagnostic of the starting model)."""
    rows = []
    for metric, label in REPORT_ROWS:
        for s in settings.values():
            for score in SCORES:
                sc = s["scores"][score]
                value = {
                    "tv_eta1": (sc["eta"].get("1") or {}).get("tv_signal"),
                    "tv_eta0.1": (sc["eta"].get("0.1") or {}).get("tv_signal"),
                    "entropy_p_old": sc["entropy_p_old"],
                    "mass_better": sc["signal"]["p_old_mass_above_min"],
                    "share_better": sc["signal"]["frac_above_min"],
                    "std_score": s["within_group"][f"l_{score}_std"],
                }[metric]
                if value is None:
                    continue
                key = f"{s['config']['setting']} {score}"
                rows.append(report_row(key, label, value["q50"], None, [s["config"]["sample_seed"]], s["n_groups"]))
    return rows


def summarize(data: dict, out=None) -> dict:
    """Quantiles over groups per setting x score x η (TV over all groups and over the groups whose rewards vary;
    p_old's mass on successes against the success rate over the groups with both successes and failures, and on
    the better reward class over the groups whose rewards vary); with the fields ``python -m tpo_core report``
    reads (``preset``, ``rows``: medians, no paper number)."""
    summary = {"quantiles": list(QUANTILES), "settings": {}}
    out_settings = summary["settings"]
    for key, rec in data["settings"].items():
        groups, rows = rec["groups"], rec["completions"]
        signal = [g for g in groups if not g["zero_variance"]]
        mixed = [g for g in groups if 0 < g["n_success"] < g["k"]]
        s = {
            "config": rec["config"],
            "model": rec.get("model"),
            "seconds": rec.get("seconds"),
            "shortcuts": rec.get("shortcuts"),
            "n_groups": len(groups),
            "n_signal_groups": len(signal),
            "n_mixed_groups": len(mixed),
            "success_rate": float(np.mean([r["success"] for r in rows])),
            "mean_reward": float(np.mean([r["reward"] for r in rows])),
            "frac_truncated": float(np.mean([r["truncated"] for r in rows])),
            "mean_length": float(np.mean([r["length"] for r in rows])),
            "within_group": {
                f"{name}_{stat}": _quantiles([g[name][stat] for g in groups])
                for name in ("l_sum", "l_mean", "length")
                for stat in ("std", "range")
            },
            "grpo_abs_advantage_signal": _quantiles(
                [r["grpo_abs_advantage"] for r in rows if not groups[r["group"]]["zero_variance"]]
            ),
            "scores": {},
        }
        for score in SCORES:
            entries = [g["scores"][score] for g in groups]
            sc = {
                "entropy_p_old": _quantiles([e["entropy_p_old"] for e in entries]),
                "effective_size": _quantiles([e["effective_size"] for e in entries]),
                "p_old_max": _quantiles([e["p_old_max"] for e in entries]),
                "mixed": {
                    "p_old_mass_success": _quantiles([g["scores"][score]["p_old_mass_success"] for g in mixed]),
                    "success_rate": _quantiles([g["success_rate"] for g in mixed]),
                    "frac_mass_above_rate": (
                        float(np.mean([g["scores"][score]["p_old_mass_success"] > g["success_rate"] for g in mixed]))
                        if mixed
                        else None
                    ),
                },
                "signal": {
                    "p_old_mass_above_min": _quantiles([g["scores"][score]["p_old_mass_above_min"] for g in signal]),
                    "frac_above_min": _quantiles([g["frac_above_min"] for g in signal]),
                    "frac_mass_above_rate": (
                        float(
                            np.mean([g["scores"][score]["p_old_mass_above_min"] > g["frac_above_min"] for g in signal])
                        )
                        if signal
                        else None
                    ),
                },
                "eta": {},
            }
            for eta in rec["config"]["etas"]:
                e = _eta_key(eta)
                abs_pq = [
                    abs(r["p_old"][score] - r["q"][score][e]) for r in rows if not groups[r["group"]]["zero_variance"]
                ]
                sc["eta"][e] = {
                    "tv": _quantiles([x["eta"][e]["tv"] for x in entries]),
                    "tv_signal": _quantiles([g["scores"][score]["eta"][e]["tv"] for g in signal]),
                    "kl_q_p_old_signal": _quantiles([g["scores"][score]["eta"][e]["kl_q_p_old"] for g in signal]),
                    "q_mass_success_mixed": _quantiles([g["scores"][score]["eta"][e]["q_mass_success"] for g in mixed]),
                    "abs_p_minus_q_signal": _quantiles(abs_pq),
                }
            s["scores"][score] = sc
        out_settings[key] = s
    configs = [rec["config"] for rec in data["settings"].values()]
    first = configs[0]
    command = (
        f"python -m tpo_core.lab.llm.spread --out {out if out is not None else 'OUT'} --task {first['task']} "
        f"--settings {','.join(c['setting'] for c in configs)} --groups {first['groups']} --k {first['k']}"
    )
    summary |= {
        "preset": "llm_spread",
        "budget": "cpu",
        "kind": "llm",
        "title": SpreadExperiment.title,
        "claim": CLAIM,
        "paper_setting": "verl, Qwen3-1.7B and DeepSeek-R1-Distill-Qwen-1.5B; this repository samples "
        "SmolLM2-135M-Instruct as tpo_core.lab.llm.rlvr's cpu budget does through TRL",
        "budget_note": (
            f"{first['groups']} puzzles x K = {first['k']} completions of ≤ {first['max_new_tokens']} tokens "
            f"per setting ({', '.join(c['setting'] for c in configs)}), T = 1, the starting model, "
            "float64 group maths; each row is a median over groups"
        ),
        "command": command,
        "train_seconds": float(sum(rec.get("seconds", 0.0) for rec in data["settings"].values())),
        "devices": 1,
        "metrics": [label for _, label in REPORT_ROWS],
        "rows": _report_rows(out_settings),
    }
    return summary


# ----------------------------------------------------------------------------------------------------------------
# figure
# ----------------------------------------------------------------------------------------------------------------
def figure_html(out) -> str:
    """:func:`figure` as one self-contained page (plotly.js inlined)."""
    import plotly.io as pio

    return pio.to_html(figure(out), include_plotlyjs=True, full_html=True)


def _box_with_points(x, y, name: str, color: str, group: str, **kwargs):
    """A box per ``x`` category of ``y`` with every point drawn over it (jittered), in ``color``; ``name`` is its
    legend entry and its offset group (boxes of one name sit side by side per category), ``group`` its legend
    group; ``kwargs`` go to ``go.Box`` (e.g. ``showlegend=False``)."""
    import plotly.graph_objects as go

    return go.Box(
        x=x,
        y=y,
        name=name,
        legendgroup=group,
        marker_color=color,
        boxpoints="all",
        jitter=0.4,
        pointpos=0,
        offsetgroup=name,
        **kwargs,
    )


def figure(out):
    """The spread of the starting model (a plotly figure; ``out`` holds ``spread.json``): TV(q, p_old) per group
    by score and η; H(p_old) per group; the within-group std of l_sum, l_mean and length; |p_i − q_i| (η = 1)
    against GRPO's |A_i| per completion; p_old's mass on successes against the success rate; l_sum against the
    length per completion."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    data = json.loads((pathlib.Path(out) / SPREAD).read_text())
    settings = list(data["settings"])
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    colour = {
        (s, score): palette[(2 * i + j) % len(palette)]
        for i, s in enumerate(settings)
        for j, score in enumerate(SCORES)
    }
    fig = make_subplots(
        rows=2,
        cols=3,
        subplot_titles=[
            "TV(q, p_old) per group (groups whose rewards vary)",
            "H(p_old) per group (ln K dashed)",
            "within-group std",
            "|p_i − q_i| (η = 1) vs GRPO's |A_i|",
            "p_old mass on successes vs success rate",
            "ℓ_sum vs length per completion",
        ],
    )
    floor = 1e-12
    ln_k = None
    for key in settings:
        rec = data["settings"][key]
        name = rec["config"]["setting"]
        groups, rows = rec["groups"], rec["completions"]
        ln_k = np.log(rec["config"]["k"])
        signal = [g for g in groups if not g["zero_variance"]]
        for score in SCORES:
            c, label = colour[(key, score)], f"{name} {score}"
            x = [f"η={e}" for e in rec["config"]["etas"] for _ in signal]
            y = [
                max(g["scores"][score]["eta"][_eta_key(e)]["tv"], floor) for e in rec["config"]["etas"] for g in signal
            ]
            fig.add_trace(_box_with_points(x, y, label, c, label), 1, 1)
            entropies = [g["scores"][score]["entropy_p_old"] for g in groups]
            fig.add_trace(_box_with_points([name] * len(groups), entropies, label, c, label, showlegend=False), 1, 2)
            keep = [r for r in rows if not groups[r["group"]]["zero_variance"]]
            fig.add_trace(
                go.Scatter(
                    x=[r["grpo_abs_advantage"] for r in keep],
                    y=[max(abs(r["p_old"][score] - r["q"][score]["1"]), floor) for r in keep],
                    mode="markers",
                    name=label,
                    legendgroup=label,
                    showlegend=False,
                    marker=dict(color=c, size=5, opacity=0.6, symbol=["circle" if r["success"] else "x" for r in keep]),
                    text=[r["text"][:60] for r in keep],
                ),
                2,
                1,
            )
            mixed = [g for g in groups if 0 < g["n_success"] < g["k"]]
            fig.add_trace(
                go.Scatter(
                    x=[g["success_rate"] for g in mixed],
                    y=[g["scores"][score]["p_old_mass_success"] for g in mixed],
                    mode="markers",
                    name=label,
                    legendgroup=label,
                    showlegend=False,
                    marker=dict(color=c, size=7),
                ),
                2,
                2,
            )
        stds = [("ℓ_sum", "l_sum"), ("ℓ_mean", "l_mean"), ("length", "length")]
        which, stds_y = [lab for lab, f in stds for _ in groups], [g[f]["std"] for _, f in stds for g in groups]
        fig.add_trace(
            _box_with_points(which, stds_y, name, colour[(key, "sum")], f"{name} sum", showlegend=False), 1, 3
        )
        fig.add_trace(
            go.Scatter(
                x=[r["length"] for r in rows],
                y=[r["l_sum"] for r in rows],
                mode="markers",
                name=name,
                legendgroup=f"{name} sum",
                showlegend=False,
                marker=dict(
                    color=colour[(key, "sum")],
                    size=5,
                    opacity=0.6,
                    symbol=["circle" if r["success"] else "x" for r in rows],
                ),
                text=[r["text"][:60] for r in rows],
            ),
            2,
            3,
        )
    if ln_k is not None:
        fig.add_hline(y=float(ln_k), line_dash="dash", line_color="gray", row=1, col=2)
    fig.add_trace(
        go.Scatter(
            x=[0, 1], y=[0, 1], mode="lines", line=dict(dash="dash", color="gray"), name="mass = rate", showlegend=False
        ),
        2,
        2,
    )
    fig.update_layout(
        boxmode="group",
        template="plotly_white",
        height=760,
        title="The starting SmolLM2's sequence log-prob spread: summed vs mean log-probs "
        "(circles: successes, x: failures)",
        legend=dict(orientation="h", y=-0.08),
    )
    fig.update_yaxes(type="log", row=1, col=1, title_text="TV")
    fig.update_yaxes(title_text="nats", row=1, col=2)
    fig.update_yaxes(type="log", row=2, col=1, title_text="|p − q|")
    fig.update_xaxes(title_text="|A| (GRPO)", row=2, col=1)
    fig.update_xaxes(title_text="sample success rate", range=[0, 1], row=2, col=2)
    fig.update_yaxes(title_text="p_old mass on successes", range=[-0.02, 1.02], row=2, col=2)
    fig.update_xaxes(title_text="length (tokens, EOS included)", row=2, col=3)
    fig.update_yaxes(title_text="ℓ_sum (nats)", row=2, col=3)
    return fig


# ----------------------------------------------------------------------------------------------------------------
# the registry's view (python -m tpo_core reproduce llm_spread)
# ----------------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SpreadExperiment(RegistryEntry):
    """The measurement as an experiment of the registry (:class:`tpo_core.lab.reproduce.experiments.Experiment`): one
    budget, ``cpu``, the default settings, groups and K of :func:`run_spread`; nothing is trained, so ``seeds``,
    ``only`` and ``partial`` do not apply (other settings, groups, K or the tiny model: this module's own command
    line, ``python -m tpo_core.lab.llm.spread``)."""

    name: str = "llm_spread"
    title: str = (
        "The starting SmolLM2's within-group sequence log-prob spread: why TPO with summed log-probs barely "
        "moves its target (no training)"
    )
    claim: str = CLAIM
    budgets: tuple = ("cpu",)

    def budget_note(self, budget: str) -> str:
        return (
            f"SmolLM2-135M-Instruct, 16 puzzles x K = 16 completions of ≤ 32 tokens per setting "
            f"({', '.join(DEFAULT_SETTINGS)}), T = 1, sampling and scoring only"
        )

    def plan(self, budget: str) -> list:
        return [{"setting": s, "groups": 16, "k": 16} for s in DEFAULT_SETTINGS]

    def default_out(self, budget: str) -> pathlib.Path:
        return pathlib.Path(f"results/{self.name}")

    def train(
        self,
        budget: str,
        out=None,
        *,
        seeds=None,
        only=None,
        partial: bool = False,
        progress: bool = True,
        command=None,
        **options,
    ) -> dict:
        experiments.refuse_options(
            self,
            dict(seeds=seeds, only=only, partial=partial, **options),
            "a measurement of the starting model: nothing is trained",
        )
        experiments.check_budget(self, budget)
        return run_spread(self.default_out(budget) if out is None else out, quiet=not progress)

    def metric_label(self, metric: str) -> str:
        return metric  # the summary's metrics are their labels already (REPORT_ROWS)

    def notes(self, summary: dict) -> str:
        return f"PyTorch ({__name__}): the starting model sampled and scored, no training"


EXPERIMENTS = {e.name: e for e in (SpreadExperiment(),)}  # this family's part of the registry


# ----------------------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------------------
def _positive_int(name: str, text: str, low: int) -> int:
    try:
        v = int(text)
    except (TypeError, ValueError):
        raise ValueError(f"--{name} {text!r} is not an integer") from None
    if v < low:
        raise ValueError(f"--{name} must be ≥ {low}, got {v}")
    return v


@cli
def main(argv=None) -> None:
    parser = OneLineParser(prog="python -m tpo_core.lab.llm.spread", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--task", default="graph_coloring")
    parser.add_argument("--settings", default=",".join(DEFAULT_SETTINGS), help="comma-separated setting names")
    parser.add_argument("--groups", default="16")
    parser.add_argument("--k", default="16")
    parser.add_argument("--max-new-tokens", default="32")
    parser.add_argument("--seed", default="0", help="sampling seed")
    parser.add_argument("--model", default="smollm2", help="smollm2 (default) or tiny (a random smoke model)")
    parser.add_argument("--model-path", default=None, help="a GGUF file or a Hugging Face folder")
    parser.add_argument("--answer-format", default=None, help="tags, lenient (default for smollm2) or raw")
    parser.add_argument("--threads", default=None, help="torch.set_num_threads")
    args = parser.parse_args(argv)
    from .tasks import TASKS, _check

    if args.task not in TASKS:
        raise ValueError(f"--task {args.task!r} is not one of {sorted(TASKS)}")
    settings = [s for s in args.settings.split(",") if s]
    if not settings:
        raise ValueError("--settings is empty")
    for s in settings:
        try:
            _check(args.task, s)
        except ValueError:
            raise ValueError(f"--settings: {s!r} is not one of {sorted(TASKS[args.task].settings)}") from None
    groups = _positive_int("groups", args.groups, 1)
    k = _positive_int("k", args.k, 2)
    max_new = _positive_int("max-new-tokens", args.max_new_tokens, 1)
    seed = _positive_int("seed", args.seed, 0)
    if args.model not in MODELS:
        raise ValueError(f"--model {args.model!r} is not one of {list(MODELS)}")
    if args.threads is not None:
        import torch

        torch.set_num_threads(_positive_int("threads", args.threads, 1))
    run_spread(
        args.out,
        task=args.task,
        settings=settings,
        groups=groups,
        k=k,
        max_new_tokens=max_new,
        model=args.model,
        model_path=args.model_path,
        answer_format=args.answer_format,
        seed=seed,
    )


if __name__ == "__main__":
    sys.exit(main())
