"""One copy of each shared rule: the engine, the demo's numpy explorer and the torch bridge read the values of
``tpo_core.constants`` (a module with no imports), not copies of them."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

from tpo_core import constants as C

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_constants_module_imports_nothing():
    tree = ast.parse((ROOT / "tpo_core" / "constants.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_the_values_are_the_papers():
    assert C.STD_FLOOR == 1e-6 and C.GRPO_EPS == 1e-8
    assert set(C.DENSE_REWARDS) < set(C.REWARDS) and "terminal" not in C.DENSE_REWARDS
    assert C.TARGETS == ("copy", "flip", "reverse_copy", "reverse_flip")


def test_engine_explorer_and_bridge_share_the_objects():
    from demos import explorer as X
    from tpo_core import config, losses, tasks

    assert losses.STD_FLOOR is C.STD_FLOOR and X.STD_FLOOR is C.STD_FLOOR
    assert losses.GRPO_EPS is C.GRPO_EPS and X.GRPO_EPS is C.GRPO_EPS
    assert tasks.TARGETS is C.TARGETS and tasks.REWARDS is C.REWARDS and tasks.DENSE_REWARDS is C.DENSE_REWARDS
    assert config.TokenConfig().std_floor is C.STD_FLOOR


def test_no_module_writes_a_constant_again():
    """No assignment of STD_FLOOR, GRPO_EPS, TARGETS, REWARDS, DENSE_REWARDS or MAX_ETA to a literal outside
    tpo_core/constants.py (the copies the review listed in losses, tasks, the explorers and the bridge)."""
    names = {"STD_FLOOR", "GRPO_EPS", "TARGETS", "REWARDS", "DENSE_REWARDS", "MAX_ETA"}
    found = []
    for path in list((ROOT / "tpo_core").rglob("*.py")) + list((ROOT / "demos").rglob("*.py")):
        if path.name == "constants.py" or "reproduce" in path.parts or "llm" in path.parts:
            continue  # the reproduction presets and the LLM experiment belong to another change
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Constant, ast.Tuple)):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id in names:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {t.id}")
    assert not found, found


def test_the_bridge_reads_the_constant_without_jax():
    code = (
        "import sys, tpo_core.bridge.torch_ops as t, tpo_core.constants as c; "
        "assert t.STD_FLOOR is c.STD_FLOOR; assert 'jax' not in sys.modules, 'jax imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
