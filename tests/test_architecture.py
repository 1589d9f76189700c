"""The import contract (``[tool.importlinter]`` in pyproject.toml): the layers hold on this tree, and the same
contract reports a copy of the tree with one upward import as broken (so a kept contract means something). The
floors script (``benchmarks/architecture.py``): the README's table is a fresh measurement, the house is at most 4
floors high with no upward import and no circle, and the same script finds an upward import and a circle that
are added to a copy of the tree."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tomllib

from benchmarks import architecture as A

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("tpo_core", "demos", "benchmarks", "book")
CONTRACTS = {
    c["id"]: c["name"]
    for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
}


def lint(root: pathlib.Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the tree at ``root`` (its pyproject.toml, its packages first on the path)."""
    env = {**os.environ, "PYTHONPATH": str(root), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
            "--config",
            "pyproject.toml",
            "--no-cache",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_contracts_are_kept():
    assert set(CONTRACTS) == {"faces", "book", "package", "bridge"}
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for name in CONTRACTS.values():
        assert f"{name} KEPT" in done.stdout, name
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in done.stdout


def test_an_upward_import_breaks_the_contract_and_the_floors_script_finds_it(tmp_path):
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with open(tmp_path / "tpo_core" / "losses.py", "a") as f:
        f.write("\nfrom tpo_core.lab import figures  # the library reaching up into the lab\n")
    with open(tmp_path / "tpo_core" / "bridge" / "torch_ops.py", "a") as f:
        f.write("\nfrom tpo_core import runtime  # noqa: E402  (and through it, JAX)\n")
    with open(tmp_path / "book" / "sync.py", "a") as f:
        f.write("\nimport demos  # noqa: E402\n")
    with open(tmp_path / "tpo_core" / "lab" / "seeds.py", "a") as f:
        f.write("\nfrom . import figures  # noqa: E402  (a circle inside the lab, which no contract forbids)\n")
    done = lint(tmp_path)
    out = done.stdout
    assert done.returncode == 1, out[-4000:] + done.stderr[-2000:]
    assert f"{CONTRACTS['package']} BROKEN" in out and "tpo_core.losses -> tpo_core.lab.figures" in out
    assert f"{CONTRACTS['bridge']} BROKEN" in out and "tpo_core.bridge.torch_ops -> tpo_core.runtime" in out
    assert "tpo_core.runtime -> jax" in out  # the indirect import of JAX
    assert f"{CONTRACTS['book']} BROKEN" in out and f"{CONTRACTS['faces']} KEPT" in out
    assert "Contracts: 1 kept, 3 broken." in out

    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from benchmarks import architecture as A; print(A.__file__); print(json.dumps(A.measure()))",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    where, measured = probe.stdout.strip().splitlines()[-2:]
    assert pathlib.Path(where).is_relative_to(tmp_path)  # the copy was measured
    m = json.loads(measured)
    assert m["upward"] == [
        "book.sync -> demos",
        "tpo_core.losses -> tpo_core.lab.figures",
    ]  # bridge -> runtime: same layer
    assert m["circles"]["modules"] == [["tpo_core.lab.figures", "tpo_core.lab.seeds"]]
    assert m["circles"]["rooms"] == [["tpo_core.lab.figures", "tpo_core.lab.seeds"]]


def test_floors_and_circles_of_a_small_graph():
    arrows = {("a", "b"), ("b", "c"), ("c", "b"), ("c", "e"), ("d", "e")}
    assert A.components("abcde", arrows) == [["e"], ["b", "c"], ["a"], ["d"]]
    assert A.floors("abcde", arrows) == 3  # a -> {b, c} -> e
    assert A.floors("de", {("d", "e")}) == 2 and A.floors("x", set()) == 1 and A.floors("", set()) == 0


def test_the_readme_table_is_a_fresh_measurement_and_the_house_is_low():
    m = A.measure()
    fix = (
        "rerun python -m benchmarks.architecture --readme and commit README.md and benchmarks/results/architecture.json"
    )
    assert A.readme_block((ROOT / "README.md").read_text()) == A.table(m), fix
    assert A.table(json.loads(A.OUT.read_text())) == A.table(m), fix
    assert m["floors"]["layers"] <= 4, m["floors"]
    assert m["upward"] == [] and m["circles"] == {"modules": [], "rooms": []}, (m["upward"], m["circles"])
    assert {
        A.layer(x)
        for x in (
            "tpo_core",
            "tpo_core.bridge.trl",
            "tpo_core.lab",
            "tpo_core.lab.llm.rlvr",
            "tpo_core.__main__",
            "demos.app",
            "book.sync",
        )
    } == {"library", "lab", "__main__", "demos", "book"}
    assert A.room("tpo_core.lab.reproduce.runner") == "tpo_core.lab.reproduce" and A.room("demos.app") == "demos"
    assert m["lines"]["library"] > 0 and m["lines"]["bridge"] > 0 and m["lines"]["lab"] > m["lines"]["library"]


def test_the_torch_bridge_imports_no_jax_at_run_time():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, tpo_core.bridge.torch_ops; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'flax', 'optax')))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
