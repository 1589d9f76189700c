"""ruff, configured in pyproject.toml ([tool.ruff]), passes on the whole tree: the lint (`ruff check`, which with
RUF100 also fails on a `# noqa` that names a rule not enabled or not needed) and the format (`ruff format --check`;
`ruff format .` fixes what it reports)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from tests.conftest import ROOT, _missing


def _ruff(*args) -> subprocess.CompletedProcess:
    if importlib.util.find_spec("ruff") is None:
        _missing("ruff", "pip install ruff==<the pin in requirements.txt>")
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_check_passes_on_the_tree():
    proc = _ruff("check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_ruff_format_leaves_the_tree_as_it_is():
    proc = _ruff("format", "--check", "--no-cache", ".")
    assert proc.returncode == 0, "run `ruff format .`:\n" + proc.stdout[-4000:] + proc.stderr[-2000:]


def test_ruff_is_the_pinned_version():
    pin = next(
        ln.split("==", 1)[1].strip()
        for ln in (ROOT / "requirements.txt").read_text().splitlines()
        if ln.startswith("ruff==")
    )
    assert _ruff("--version").stdout.split() == ["ruff", pin]


def test_ruff_check_finds_an_unused_import_and_an_unused_noqa(tmp_path):
    """The configuration is the one in force (pyproject.toml), and it fails where it should."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nx = 1  # noqa: E731\n")
    proc = _ruff("check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad))
    assert proc.returncode == 1 and "F401" in proc.stdout and "RUF100" in proc.stdout, proc.stdout
