"""tpo_core.lab.llm.tasks: the reward wrapper gives exactly the Reasoning Gym verifier's score on hand-made answers."""

import itertools
import json

import pytest

pytest.importorskip("reasoning_gym", reason="the LLM tasks need reasoning-gym: pip install 'tpo_core[llm]'")

from tpo_core.lab.llm import tasks as T


def _assistant(text):
    return [{"role": "assistant", "content": text}]  # TRL's conversational completion


def test_graph_colouring_correct_partial_wrong():
    ds = T.make_dataset("graph_coloring", 4, seed=0, setting="v4")
    reward = T.RGReward(ds)
    i = next(j for j, e in enumerate(reward.entries) if e["metadata"]["puzzle"]["edges"])
    puzzle = reward.entries[i]["metadata"]["puzzle"]
    vertices, edges = puzzle["vertices"], puzzle["edges"]
    proper = next(
        dict(zip(map(str, vertices), c))
        for c in itertools.product(puzzle["color_options"], repeat=len(vertices))
        if all(c[vertices.index(a)] != c[vertices.index(b)] for a, b in edges)
    )
    clash = {str(v): puzzle["color_options"][0] for v in vertices}  # an edge's ends share a colour
    cases = {
        f"Here: <answer>{json.dumps(proper)}</answer>": 1.0,
        f"<answer>{json.dumps(clash)}</answer>": 0.01,  # the verifier's credit for valid JSON
        f"{json.dumps(proper)}": 0.0,  # no tags: no answer
        "<answer>red, blue</answer>": 0.0,
    }
    for text, expected in cases.items():
        own = ds.score_answer(T.extract_answer(text), reward.entries[i])
        assert own == expected
        assert reward.score(text, i) == expected
    got = reward(list(map(_assistant, cases)), entry_index=[i] * len(cases))
    assert got == list(cases.values())


def test_knights_and_knaves_partial_credit():
    ds = T.make_dataset("knights_knaves", 3, seed=0, setting="p2")
    reward = T.RGReward(ds)
    entry = reward.entries[0]
    right = entry["answer"]  # "A is a knight, and B is a knave."
    flip = {"knight": "knave", "knave": "knight"}
    parts = right.rstrip(".").split(", and ")
    first_flipped = parts[0].rsplit(" ", 1)[0] + " " + flip[parts[0].rsplit(" ", 1)[1]] + ", and " + parts[1] + "."
    all_flipped = ", and ".join(p.rsplit(" ", 1)[0] + " " + flip[p.rsplit(" ", 1)[1]] for p in parts) + "."
    for text, expected in [
        (f"<answer>{right}</answer>", 1.0),
        (f"<answer>{first_flipped}</answer>", 0.3 + 0.7 / 2),
        (f"<answer>{all_flipped}</answer>", 0.0),
        ("no tags " + right, 0.0),
    ]:
        assert reward.score(text, 0) == pytest.approx(expected)
        assert reward.score(text, 0) == ds.score_answer(T.extract_answer(text), entry)


def test_leg_counting_exact_and_substring_credit():
    ds = T.make_dataset("leg_counting", 3, seed=0, setting="a2")
    reward = T.RGReward(ds)
    oracle = reward.entries[1]["answer"]
    for text, expected in [
        (f"<answer>{oracle}</answer>", 1.0),
        (f"<answer>{oracle} legs</answer>", len(oracle) / len(oracle + " legs")),
        (f"<answer>{int(oracle) + 1}</answer>", 0.0),
    ]:
        assert reward.score(_assistant(text), 1) == pytest.approx(expected)
        assert reward.score(text, 1) == ds.score_answer(T.extract_answer(text), reward.entries[1])


def test_prompts_are_fixed_by_the_seed_and_use_the_librarys_system_prompt():
    from reasoning_gym.utils import SYSTEM_PROMPTS

    a, _ = T.train_prompts("graph_coloring", 5, seed=7)
    b, _ = T.train_prompts("graph_coloring", 5, seed=7)
    c, _ = T.train_prompts("graph_coloring", 5, seed=8)
    assert a["prompt"] == b["prompt"] and a["prompt"] != c["prompt"]
    assert a["prompt"][0][0] == {"role": "system", "content": SYSTEM_PROMPTS["direct"]}
    assert a["entry_index"] == list(range(5))


def test_bad_task_or_setting_names_the_parameter():
    with pytest.raises(ValueError, match="task="):
        T.make_dataset("chess", 2, 0)
    with pytest.raises(ValueError, match="setting="):
        T.make_dataset("graph_coloring", 2, 0, setting="huge")
    with pytest.raises(ValueError, match="size"):
        T.make_dataset("graph_coloring", 0, 0)


def test_answer_formats_tags_lenient_raw():
    ds = T.make_dataset("leg_counting", 2, seed=0, setting="a1")
    oracle = ds[0]["answer"]
    block = f"Let me count.\n```\n{oracle}\n```"
    cut = f"```text\n{oracle}"  # a code block cut off by the length cap
    assert T.extract_answer(block, "tags") is None
    assert T.extract_answer(block, "lenient") == oracle and T.extract_answer(cut, "lenient") == oracle
    assert T.extract_answer(f"```\n1\n``` <answer>{oracle}</answer>", "lenient") == oracle  # tags win
    assert T.extract_answer(f"  {oracle} legs \n", "raw") == f"{oracle} legs"
    assert T.extract_answer("no code here 7", "lenient") == "no code here 7"
    reward = {f: T.RGReward(ds, answer_format=f) for f in T.ANSWER_FORMATS}
    assert reward["tags"].score(block, 0) == 0.0 and reward["lenient"].score(block, 0) == 1.0
    assert reward["raw"].score(block, 0) == ds.score_answer(block.strip(), ds[0])  # substring credit
    with pytest.raises(ValueError, match="answer_format"):
        T.RGReward(ds, answer_format="json")
