"""Fresh virtual environments for the packaging tests (tests/test_wheel.py, tests/test_jax_compat.py), each built once
per dependency list and kept: ``$TPO_VENV_CACHE``, else ``<tmp>/tpo-venvs/<name>-<key>``, the key a hash of the
Python version, the requirements and the constraints, so a changed dependency list builds a new one. A lock file
serialises builders (two pytest-xdist workers, or two checkouts on one machine); a venv counts as built only once
its ``.complete`` marker is written, so a build killed half-way is redone. pip's own cache makes a rebuild cheap.

Building needs the package index: when it is unreachable the caller's test skips, and fails under ``CI=true``.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CACHE = pathlib.Path(os.environ.get("TPO_VENV_CACHE") or pathlib.Path(tempfile.gettempdir()) / "tpo-venvs")
# what pip and build print when the index cannot be reached (or the index lacks the release asked for)
OFFLINE = ("Could not find a version that satisfies", "No matching distribution found", "NewConnectionError",
           "Name or service not known", "Temporary failure in name resolution", "Network is unreachable",
           "Max retries exceeded", "ConnectTimeoutError", "Connection refused")
# the environment the repository's tests run in, which a program in a fresh venv must not see
REPOSITORY_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "TPO_DATA_DIR", "TPO_REFERENCE_NPZ",
                        "TPO_RESULTS_DIR", "TPO_CACHE_DIR", "TPO_JAX_CACHE", "TPO_BOOK_BUILD")


def needs_index(what: str, output: str):
    """Skip (fail under CI=true) when ``output`` says the package index is unreachable; else return."""
    lines = [line for line in output.strip().splitlines() if line.strip()]
    if any(marker in output for marker in OFFLINE):
        why = f"{what} needs the package index, which is unreachable here: {lines[-1] if lines else output}"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


def run(cmd, timeout: float, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)


def clean_env(home: pathlib.Path, **extra) -> dict:
    """This process's environment without the repository's variables (no PYTHONPATH: the checkout is not on the
    path), with the package's caches under ``home`` and the user site off."""
    env = {k: v for k, v in os.environ.items() if k not in REPOSITORY_VARIABLES}
    env.update(TPO_CACHE_DIR=str(home / "cache"), TPO_JAX_CACHE=str(home / "jax-cache"), PYTHONNOUSERSITE="1",
               GRADIO_ANALYTICS_ENABLED="False", **extra)
    return env


def pinned() -> list[str]:
    """requirements.txt's pins as pip constraints (``name==version``; a constraint may not carry extras)."""
    pins = []
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)", line.strip())
        if m:
            pins.append(f"{m.group(1)}=={m.group(2)}")
    return pins


def cached_venv(name: str, requirements, constraints=()) -> pathlib.Path:
    """The python of a venv holding ``requirements`` (pip-installed under ``constraints``), built if not cached."""
    requirements, constraints = sorted(requirements), sorted(constraints)
    key = hashlib.sha256(json.dumps([list(sys.version_info[:3]), requirements, constraints]).encode()).hexdigest()
    home = CACHE / f"{name}-{key[:16]}"
    python = home / "bin" / "python"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # released when the file closes
        if (home / ".complete").is_file() and python.exists():
            return python
        shutil.rmtree(home, ignore_errors=True)
        made = run([sys.executable, "-m", "venv", home], 300)   # no system site-packages: nothing of this venv
        assert made.returncode == 0, made.stderr
        pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements]
        if constraints:
            (home / "constraints.txt").write_text("\n".join(constraints) + "\n")
            pip += ["-c", home / "constraints.txt"]
        done = run(pip, 1800, env=clean_env(home), cwd=home)
        if done.returncode != 0:
            shutil.rmtree(home, ignore_errors=True)
            needs_index(f"the {name} venv", done.stdout + done.stderr)
            raise AssertionError(f"pip could not build the {name} venv:\n{done.stderr[-4000:]}")
        (home / ".complete").write_text(json.dumps(dict(requirements=requirements, constraints=constraints)))
    return python


def overlay_venv(base_python: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    """A new, empty venv at ``dest`` that also imports what the cached venv of ``base_python`` holds (a ``.pth``
    file naming its site-packages): what is installed here stays here, so the cached venv is never modified and
    two test sessions can share it."""
    made = run([sys.executable, "-m", "venv", dest], 300)
    assert made.returncode == 0, made.stderr
    python = dest / "bin" / "python"
    paths = run([python, "-c", "import sysconfig; p = sysconfig.get_paths(); print(p['purelib']); print(p['platlib'])"],
                60).stdout.split()
    base = run([base_python, "-c", "import sysconfig; p = sysconfig.get_paths(); print(p['purelib']); "
                "print(p['platlib'])"], 60).stdout.split()
    pathlib.Path(paths[0], "tpo_cached_venv.pth").write_text("\n".join(dict.fromkeys(base)) + "\n")
    return python
