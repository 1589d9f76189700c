"""The library's chunk loop and streaming module: one chunk-size policy, task families chosen once, no lab imports, and the
demo's task-name literals gone."""

from __future__ import annotations

import ast
import pathlib

import pytest

from tpo_core import constants, stream, train
from tpo_core.config import BanditConfig, TokenConfig

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "total,size,expected",
    [
        (10, None, [10]),
        (10, 10, [10]),
        (10, 99, [10]),
        (12, 5, [4, 4, 4]),  # 4 divides 12 and is within a factor 2 of 5: one compiled shape
        (13, 5, [5, 5, 3]),  # 13 is prime: chunks of 5 and a ragged last one
        (7, 0, [1] * 7),
        (0, 5, []),
    ],
)
def test_whole_run_chunks(total, size, expected):
    assert train.chunk_sizes(total, size) == expected


@pytest.mark.parametrize(
    "total,chunk,expected",
    [
        (1, 5, [1]),
        (6, 5, [1, 5]),
        (13, 5, [1, 5, 5, 1, 1]),
        (0, 5, []),
    ],
)
def test_ui_chunks_start_with_one_then_two_shapes(total, chunk, expected):
    assert stream.schedule(total, chunk) == expected == train.chunk_sizes(total, chunk, first=1)
    assert sum(expected) == total and set(expected) <= {1, chunk}


def test_train_chunk_plan_is_the_same_policy():
    from tpo_core.train import chunk_plan

    for n in range(1, 40):
        for r in (None, 1, 3, 5, 8):
            assert chunk_plan(n, r) == train.chunk_sizes(n, r)[0]


def test_families_are_chosen_once():
    assert tuple(stream.FAMILIES) == constants.TASK_FAMILIES
    token, bandit = stream.TOKEN, stream.BANDIT
    for of in (token.name, token.kind, TokenConfig(), {"task": token.name}, token):
        assert stream.family(of) is token
    for of in (bandit.name, bandit.kind, BanditConfig(), {"task": bandit.name}):
        assert stream.family(of) is bandit
    assert token.is_token and not bandit.is_token
    assert token.block == 1 and bandit.block == stream.BANDIT_EVAL_EVERY
    assert "tpo_token" in token.methods and "ce" in bandit.methods and "ce" not in token.methods
    with pytest.raises(ValueError, match="task"):
        stream.family("chess")


def test_by_point_is_point_major():
    import numpy as np

    runs = np.arange(6)[:, None] * np.ones((1, 4))  # 2 points × 3 seeds, point-major, 4 episodes
    out = train.by_point({"error": runs}, 2, 3)["error"]
    assert out.shape == (2, 3, 4) and (out[1, 0] == 3).all() and (out[0, 2] == 2).all()


def test_stream_imports_only_the_library():
    tree = ast.parse((ROOT / "tpo_core" / "stream.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.add(("." * node.level) + (node.module or ""))
            imported.update(f"{'.' * node.level}{node.module or ''}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    bad = [
        m
        for m in imported
        if any(w in m for w in ("mnist", "plotting", "figures", "live", "lab", "demos", "widget", "gradio", "plotly"))
    ]
    assert not bad, bad


def test_the_demo_and_the_widget_name_no_task_family_literally():
    found = []
    for path in sorted((ROOT / "demos").glob("*.py")) + [
        ROOT / "tpo_core" / "lab" / "widget.py",
        ROOT / "tpo_core" / "lab" / "live.py",
    ]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in constants.TASK_FAMILIES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found
