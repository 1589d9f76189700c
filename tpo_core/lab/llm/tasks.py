"""Verifiable prompts and rewards from Reasoning Gym (``reasoning-gym`` 0.1.25), generated offline with fixed seeds.

Each task is a Reasoning Gym dataset at a named difficulty setting. A prompt is a chat: the library's own
``"direct"`` system prompt (answer between ``<answer>`` and ``</answer>``, no preamble) and the puzzle. A
completion is scored by the library's own verifier, ``dataset.score_answer(answer, entry)``, partial credit
included (as the paper's Reasoning Gym runs, §3.8), on the answer extracted by the library's own
``extract_answer`` (the last ``<answer>…</answer>``).

===============  =====================  ============================================================
task             Reasoning Gym dataset  partial credit of the verifier
===============  =====================  ============================================================
graph_coloring   ``graph_color``        1 a proper colouring, 0.01 any JSON, else 0
knights_knaves   ``knights_knaves``     1 exact, 0.3 + 0.7·(fraction right) when every name is assigned
leg_counting     ``leg_counting``       arithmetic word problems ("how many legs do 3 cows and …"); 1 exact
gsm_symbolic     ``gsm_symbolic``       GSM8K-style templates (one difficulty in this version); 1 exact, 0.01 any number
===============  =====================  ============================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "TASKS",
    "ANSWER_FORMATS",
    "TaskSpec",
    "make_dataset",
    "chat_prompt",
    "completion_text",
    "extract_answer",
    "RGReward",
    "train_prompts",
    "success_rate",
]


@dataclass(frozen=True)
class TaskSpec:
    dataset: str  # Reasoning Gym name
    settings: dict = field(default_factory=dict)  # name -> config kwargs
    default: str = ""  # the setting used for training (picked from the measurement)


TASKS = {
    "graph_coloring": TaskSpec(
        "graph_color",
        {
            "v3": dict(num_colors=3, min_num_vertices=3, max_num_vertices=3, edge_probability=0.4),
            "v4": dict(num_colors=3, min_num_vertices=4, max_num_vertices=4, edge_probability=0.3),
            "v6": dict(num_colors=3, min_num_vertices=6, max_num_vertices=6, edge_probability=0.2),
            # no shortcut (tpo_core.lab.llm.spread): a constant answer solves ≈ 18 %, a random colouring ≈ 7 %
            "v6p5": dict(num_colors=3, min_num_vertices=6, max_num_vertices=6, edge_probability=0.5),
        },
        default="v3",
    ),
    "knights_knaves": TaskSpec(
        "knights_knaves",
        {
            "p2": dict(n_people=2, depth_constraint=2, width_constraint=2),
            "p3": dict(n_people=3, depth_constraint=2, width_constraint=2),
        },
        default="p2",
    ),
    "leg_counting": TaskSpec(
        "leg_counting",
        {
            "a1": dict(min_animals=1, max_animals=1, min_instances=1, max_instances=3),
            "a2": dict(min_animals=2, max_animals=2, min_instances=1, max_instances=5),
            "a3": dict(min_animals=3, max_animals=3, min_instances=1, max_instances=10),
        },
        default="a2",
    ),
    "gsm_symbolic": TaskSpec("gsm_symbolic", {"d1": dict(difficulty=1.0)}, default="d1"),
}


def _check(task: str, setting: str | None) -> tuple[TaskSpec, str]:
    if task not in TASKS:
        raise ValueError(f"task={task!r} is not one of {sorted(TASKS)}")
    spec = TASKS[task]
    setting = spec.default if setting is None else setting
    if setting not in spec.settings:
        raise ValueError(f"setting={setting!r} is not one of {sorted(spec.settings)} for task {task!r}")
    return spec, setting


def make_dataset(task: str, size: int, seed: int, setting: str | None = None):
    """The Reasoning Gym dataset (deterministic in ``seed``; nothing is downloaded)."""
    import reasoning_gym

    spec, setting = _check(task, setting)
    if size < 1:
        raise ValueError(f"size must be ≥ 1, got {size}")
    return reasoning_gym.create_dataset(spec.dataset, size=size, seed=seed, **spec.settings[setting])


def chat_prompt(question: str) -> list[dict]:
    """System + user messages; the system prompt is the library's ``"direct"`` one (answer tags, no preamble)."""
    from reasoning_gym.utils import SYSTEM_PROMPTS

    return [{"role": "system", "content": SYSTEM_PROMPTS["direct"]}, {"role": "user", "content": question}]


def completion_text(completion) -> str:
    """TRL passes conversational completions as ``[{"role": "assistant", "content": …}]``, plain ones as str."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content", "") for m in completion if m.get("role", "assistant") == "assistant")


ANSWER_FORMATS = ("tags", "lenient", "raw")
_CODE_BLOCK = re.compile(r"```[a-zA-Z]*\n?(.*?)(?:```|$)", re.DOTALL)


def extract_answer(text: str, answer_format: str = "tags") -> str | None:
    """The answer a verifier sees.

    * ``"tags"`` (Reasoning Gym's convention, its own extractor): the last ``<answer>…</answer>``, else None;
    * ``"lenient"``: the tags if present, else the last Markdown code block (closed or cut off), else the
      whole completion, stripped. SmolLM2-135M never wrote the tags in our measurement (it answers in code
      blocks), so with ``"tags"`` every reward is 0 and no group carries signal;
    * ``"raw"``: the whole completion, stripped.
    """
    from reasoning_gym.utils import extract_answer as rg_extract

    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format={answer_format!r} is not one of {ANSWER_FORMATS}")
    if answer_format == "raw":
        return text.strip()
    tagged = rg_extract(text)
    if tagged is not None or answer_format == "tags":
        return tagged
    blocks = _CODE_BLOCK.findall(text)
    return (blocks[-1] if blocks else text).strip()


class RGReward:
    """A TRL reward function: score each completion with the dataset's own ``score_answer``.

    The training dataset carries an ``entry_index`` column (TRL forwards dataset columns to reward functions);
    entries are generated once and kept, so the verifier sees exactly the puzzle the prompt showed.
    """

    def __init__(self, dataset, name: str = "reasoning_gym", answer_format: str = "tags"):
        if answer_format not in ANSWER_FORMATS:
            raise ValueError(f"answer_format={answer_format!r} is not one of {ANSWER_FORMATS}")
        self.dataset, self.answer_format = dataset, answer_format
        self.entries = [dataset[i] for i in range(len(dataset))]
        self.__name__ = name  # TRL logs rewards under the function's name

    def score(self, completion, index: int) -> float:
        answer = extract_answer(completion_text(completion), self.answer_format)
        return float(self.dataset.score_answer(answer, self.entries[index]))

    def __call__(self, completions, entry_index, **_):
        return [self.score(c, int(i)) for c, i in zip(completions, entry_index)]


def train_prompts(task: str, n: int, seed: int, setting: str | None = None, answer_format: str = "tags"):
    """(HF ``Dataset`` with ``prompt`` (chat) and ``entry_index``, the reward function) for ``n`` puzzles."""
    from datasets import Dataset

    ds = make_dataset(task, n, seed, setting)
    reward = RGReward(ds, name=task, answer_format=answer_format)
    rows = {"prompt": [chat_prompt(e["question"]) for e in reward.entries], "entry_index": list(range(n))}
    return Dataset.from_dict(rows), reward


def success_rate(
    model,
    tokenizer,
    task: str,
    setting: str | None = None,
    *,
    n_prompts: int = 4,
    k: int = 8,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    seed: int = 1234,
) -> dict:
    """The starting policy's rewards: ``k`` sampled completions for each of ``n_prompts`` puzzles.

    Returns, for each answer format, the mean reward, the fraction of completions scored 1 (``success``) and
    the fraction of groups whose rewards are all equal (no learning signal for GRPO or TPO); the fraction with
    an ``<answer>`` tag, a few sample completions, and the wall time.
    """
    import time

    import numpy as np
    import torch

    ds = make_dataset(task, n_prompts, seed, setting)
    rewards = {f: RGReward(ds, answer_format=f) for f in ANSWER_FORMATS}
    reward = rewards["tags"]
    torch.manual_seed(seed)
    start = time.perf_counter()
    scores, tagged, samples = {f: [] for f in ANSWER_FORMATS}, [], []
    for i, entry in enumerate(reward.entries):
        enc = tokenizer.apply_chat_template(
            chat_prompt(entry["question"]), add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        with torch.no_grad():
            out = model.generate(
                **enc,
                do_sample=True,
                temperature=temperature,
                top_p=1.0,
                top_k=0,
                max_new_tokens=max_new_tokens,
                num_return_sequences=k,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        for f, r in rewards.items():
            scores[f].append([r.score(t, i) for t in texts])
        tagged.append([extract_answer(t) is not None for t in texts])
        samples.append(texts[0])
    by_format = {}
    for f, sc in scores.items():
        s = np.asarray(sc)
        by_format[f] = {
            "mean_reward": float(s.mean()),
            "success": float((s >= 1.0).mean()),
            "zero_variance_frac": float((s.std(axis=1) == 0).mean()),
        }
    return {
        "task": task,
        "setting": setting or TASKS[task].default,
        "n_prompts": n_prompts,
        "k": k,
        "max_new_tokens": max_new_tokens,
        "temperature": temperature,
        **by_format,
        "tagged": float(np.mean(tagged)),
        "seconds": time.perf_counter() - start,
        "samples": samples[:3],
    }
