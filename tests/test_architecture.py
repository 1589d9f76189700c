"""The import contract (``[tool.importlinter]`` in pyproject.toml): the layers hold on this tree, and the same
contract reports a copy of the tree with one upward import as broken (so a kept contract means something)."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("tpo_core", "demos", "benchmarks", "book")
CONTRACTS = {c["id"]: c["name"] for c in
             tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]}


def lint(root: pathlib.Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the tree at ``root`` (its pyproject.toml, its packages first on the path)."""
    env = {**os.environ, "PYTHONPATH": str(root), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                           "lint_imports_command()", "--config", "pyproject.toml", "--no-cache"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_contracts_are_kept():
    assert set(CONTRACTS) == {"faces", "book", "package", "bridge"}
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for name in CONTRACTS.values():
        assert f"{name} KEPT" in done.stdout, name
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in done.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with open(tmp_path / "tpo_core" / "losses.py", "a") as f:
        f.write("\nfrom tpo_core.lab import figures  # the library reaching up into the lab\n")
    with open(tmp_path / "tpo_core" / "bridge" / "torch_ops.py", "a") as f:
        f.write("\nfrom tpo_core import runtime  # noqa: E402  (and through it, JAX)\n")
    with open(tmp_path / "book" / "sync.py", "a") as f:
        f.write("\nimport demos  # noqa: E402\n")
    done = lint(tmp_path)
    out = done.stdout
    assert done.returncode == 1, out[-4000:] + done.stderr[-2000:]
    assert f"{CONTRACTS['package']} BROKEN" in out and "tpo_core.losses -> tpo_core.lab.figures" in out
    assert f"{CONTRACTS['bridge']} BROKEN" in out and "tpo_core.bridge.torch_ops -> tpo_core.runtime" in out
    assert "tpo_core.runtime -> jax" in out                                  # the indirect import of JAX
    assert f"{CONTRACTS['book']} BROKEN" in out and f"{CONTRACTS['faces']} KEPT" in out
    assert "Contracts: 1 kept, 3 broken." in out


def test_the_torch_bridge_imports_no_jax_at_run_time():
    done = subprocess.run([sys.executable, "-c", "import sys, tpo_core.bridge.torch_ops; "
                           "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'flax', 'optax')))"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
