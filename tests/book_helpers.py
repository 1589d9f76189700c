"""The built book, shared by the build's and the browser's tests of tests/test_book.py.

``ensure_built()`` runs ``python -m book.build`` (the whole book, quick mode) once per test session
unless ``_build/`` already holds a successful full build newer than every input of the book
(chapters, config, toc, bibliography, book/*.py, tpo_core/*.py). ``TPO_BOOK_REBUILD=1`` forces a
build. It returns the build's stamp (``_build/tpo_build.json``).

While chapters are being written, ``TPO_BOOK_USE_BUILT=1`` uses whatever ``_build/`` holds (for
example a ``python -m book.build --only 01`` build) and checks only the pages that build made.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import yaml

from tests.conftest import FAST_COMPILE

ROOT = pathlib.Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
STAMP = ROOT / "_build" / "tpo_build.json"
# A bound for a build that hangs (a kernel that never answers), not an estimate: the stamp records what each build
# took (`seconds`, and each page's `executed_s`), and the build's test prints it.
BUILD_TIMEOUT_S = 3600

_result: dict | None = None
_error: str | None = None


def use_built() -> bool:
    return os.environ.get("TPO_BOOK_USE_BUILT") == "1" and STAMP.exists()


def toc_docs() -> list[str]:
    if use_built():
        return json.loads(STAMP.read_text())["docs"]
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    docs = [toc["root"]]
    for part in toc.get("parts", []):
        docs += [c["file"] for c in part["chapters"]]
    return docs


def chapter_docs() -> list[str]:
    """The numbered chapters (book/NN_name) of the toc."""
    return [d for d in toc_docs() if pathlib.PurePath(d).name[:2].isdigit()]


def book_inputs() -> list[pathlib.Path]:
    files = [ROOT / "_config.yml", ROOT / "_toc.yml"]
    files += [p for p in (ROOT / "book").iterdir() if p.suffix in (".md", ".bib", ".py")]
    files += list((ROOT / "tpo_core").rglob("*.py"))
    results = ROOT / "results"
    if results.is_dir():
        files += [p for p in results.rglob("*") if p.is_file()]
    return files


def is_fresh() -> bool:
    if os.environ.get("TPO_BOOK_REBUILD") == "1" or not STAMP.exists():
        return False
    stamp = json.loads(STAMP.read_text())
    if not (stamp.get("ok") and stamp.get("full")) or stamp.get("docs") != toc_docs():
        return False
    built = STAMP.stat().st_mtime
    return all(p.stat().st_mtime <= built for p in book_inputs())


def ensure_built() -> dict:
    """Build the book if needed (once per session); raise with the log tail if the build failed."""
    global _result, _error
    if _error is not None:
        raise RuntimeError(_error)
    if _result is not None:
        return _result
    if use_built():
        _result = json.loads(STAMP.read_text())
        return _result
    if not is_fresh():
        env = dict(os.environ, TPO_QUICK=os.environ.get("TPO_QUICK", "1"), PYTHONPATH=str(ROOT))
        # the book times real runs: drop the tests' fast-compile flags (tests/conftest.py) for its build
        env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split() if f not in FAST_COMPILE)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "book.build"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as e:  # remember it: the other book tests must not build again
            _error = f"python -m book.build did not finish within {BUILD_TIMEOUT_S} s"
            raise RuntimeError(_error) from e
        if proc.returncode != 0 or not STAMP.exists():
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-60:])
            _error = f"python -m book.build exited with {proc.returncode}:\n{tail}"
            raise RuntimeError(_error)
    _result = json.loads(STAMP.read_text())
    return _result
