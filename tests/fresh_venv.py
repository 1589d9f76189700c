"""Fresh virtual environments for the packaging tests (tests/test_wheel.py, tests/test_jax_compat.py), each built once
per dependency list and kept: ``$TPO_VENV_CACHE``, else ``<tmp>/tpo-venvs/<name>-<key>``, the key a hash of the
Python version, pip's version, the requirements and the constraints, so a changed dependency list builds a new one.
A lock file serialises builders (pytest-xdist workers, the background preparer below, two checkouts on one
machine); a venv counts as built only once its ``.complete`` marker is written, so a build killed half-way is redone.

Building waits mostly on the package index (a minute or more each), so a test session that will run these tests
starts building them at once in a background process (``start_preparing``, called by tests/conftest.py; the
tests themselves run late in their worker's queue and find them built). Needs the package index: when it is
unreachable the caller's test skips, and fails under ``CI=true``.
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
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CACHE = pathlib.Path(os.environ.get("TPO_VENV_CACHE") or pathlib.Path(tempfile.gettempdir()) / "tpo-venvs")
# what pip and build print when the index cannot be reached (or the index lacks the release asked for)
OFFLINE = (
    "Could not find a version that satisfies",
    "No matching distribution found",
    "NewConnectionError",
    "Name or service not known",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Max retries exceeded",
    "ConnectTimeoutError",
    "Connection refused",
)
# the environment the repository's tests run in, which a program in a fresh venv must not see
# the pip every cached venv gets first: the one a fresh venv of Python 3.11 brings (23.2) takes 5 min to resolve the
# LLM extras here, this one 1.5 min
PIP = "pip==26.3"
REPOSITORY_VARIABLES = (
    "PYTHONPATH",
    "PYTHONHOME",
    "VIRTUAL_ENV",
    "TPO_DATA_DIR",
    "TPO_REFERENCE_NPZ",
    "TPO_RESULTS_DIR",
    "TPO_CACHE_DIR",
    "TPO_JAX_CACHE",
    "TPO_BOOK_BUILD",
)


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
    env.update(
        TPO_CACHE_DIR=str(home / "cache"),
        TPO_JAX_CACHE=str(home / "jax-cache"),
        PYTHONNOUSERSITE="1",
        GRADIO_ANALYTICS_ENABLED="False",
        **extra,
    )
    return env


def write_atomically(path: pathlib.Path, text: str):
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


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
    key = hashlib.sha256(json.dumps([list(sys.version_info[:3]), PIP, requirements, constraints]).encode()).hexdigest()
    home = CACHE / f"{name}-{key[:16]}"
    python = home / "bin" / "python"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if (home / ".complete").is_file() and python.exists():
            return python
        shutil.rmtree(home, ignore_errors=True)
        made = run([sys.executable, "-m", "venv", home], 300)  # no system site-packages: nothing of this venv
        assert made.returncode == 0, made.stderr
        pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        upgraded = run([*pip, PIP], 600, env=clean_env(home), cwd=home)
        if upgraded.returncode != 0:
            shutil.rmtree(home, ignore_errors=True)
            needs_index(f"the {name} venv", upgraded.stdout + upgraded.stderr)
            raise AssertionError(f"pip could not install {PIP}:\n{upgraded.stderr[-4000:]}")
        pip += requirements
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
    """A new, empty venv at ``dest`` (no pip of its own) that also imports what the cached venv of ``base_python``
    holds, its pip included (a ``.pth`` file adds the cached venv's site-packages as a site folder): what is
    installed here stays here, so the cached venv is never modified and two test sessions can share it."""
    made = run([sys.executable, "-m", "venv", "--without-pip", dest], 300)
    assert made.returncode == 0, made.stderr
    python = dest / "bin" / "python"
    where = "import sysconfig; p = sysconfig.get_paths(); print(p['purelib']); print(p['platlib'])"
    own, base = run([python, "-c", where], 60).stdout.split(), run([base_python, "-c", where], 60).stdout.split()
    lines = [f"import site; site.addsitedir({d!r})" for d in dict.fromkeys(base)]
    pathlib.Path(own[0], "tpo_cached_venv.pth").write_text("\n".join(lines) + "\n")
    return python


# -- what the packaging tests need ----------------------------------------------------------------------------------
def project_requirements() -> tuple[list[str], dict]:
    """pyproject's core dependencies and optional-dependency lists (the wheel's metadata must say the same:
    tests/test_wheel.py)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"]), dict(project["optional-dependencies"])


def floor_pins() -> list[str]:
    """pyproject's declared floors as exact pins (``jax>=0.7.1`` -> ``jax[cpu]==0.7.1`` and ``jaxlib==0.7.1``)."""
    pins = []
    for dep in project_requirements()[0]:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)", dep)
        assert m, f"every core dependency declares a floor and nothing else, so its floor can be tested: {dep!r}"
        name, floor = m.groups()
        pins += [f"jax[cpu]=={floor}", f"jaxlib=={floor}"] if name == "jax" else [f"{name}=={floor}"]
    return pins


def wheel_deps_venv() -> pathlib.Path:
    """The wheel's declared dependencies under requirements.txt's pins (the wheel itself is installed per session)."""
    return cached_venv("wheel-deps", project_requirements()[0], constraints=pinned())


def floor_venv() -> pathlib.Path:
    """Every core dependency at its declared floor; their own dependencies as pip resolves them."""
    return cached_venv("jax-floor", floor_pins())


LLM_EXTRAS = ("trl", "verl", "llm")


def extras_resolve() -> dict:
    """{package: version} that ``pip install --dry-run`` picks for the core dependencies and the LLM extras together
    under requirements.txt's pins, in the wheel's dependency venv (so: what installing ``tpo_core[trl,verl,llm]``
    there would add). Kept beside the venvs, keyed like them, and read back while nothing it depends on changes."""
    core, extras = project_requirements()
    requirements = sorted({*core, *(r for e in LLM_EXTRAS for r in extras[e])})
    python, pins = wheel_deps_venv(), pinned()
    key = hashlib.sha256(json.dumps([list(sys.version_info[:3]), PIP, requirements, pins]).encode()).hexdigest()
    kept = CACHE / f"extras-resolve-{key[:16]}.json"
    with open(CACHE / f"{kept.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if kept.is_file():
            return json.loads(kept.read_text())
        work = pathlib.Path(tempfile.mkdtemp(prefix="tpo-resolve-"))
        try:
            (work / "constraints.txt").write_text("\n".join(pins) + "\n")
            done = run(
                [
                    python,
                    "-m",
                    "pip",
                    "install",
                    "--dry-run",
                    "-q",
                    "--disable-pip-version-check",
                    "--report",
                    work / "report.json",
                    "-c",
                    work / "constraints.txt",
                    *requirements,
                ],
                1800,
                cwd=work,
                env=clean_env(work),
            )
            if done.returncode != 0:
                needs_index("resolving the LLM extras", done.stdout + done.stderr)
                raise AssertionError(f"the LLM extras do not resolve with the pins:\n{done.stderr[-4000:]}")
            from packaging.utils import canonicalize_name

            picked = {
                canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"]
                for i in json.loads((work / "report.json").read_text())["install"]
            }
        finally:
            shutil.rmtree(work, ignore_errors=True)
        write_atomically(kept, json.dumps(picked, indent=1, sort_keys=True))
    return picked


# -- the background preparer ----------------------------------------------------------------------------------------
_preparer = None
# what each packaging test file needs built, in the order the preparer builds it
NEEDS = {"test_wheel": ("wheel-deps", "extras"), "test_jax_compat": ("jax-floor",)}
STEPS = {"wheel-deps": wheel_deps_venv, "jax-floor": floor_venv, "extras": extras_resolve}


def _session_needs(config) -> list[str]:
    """The preparer's steps for the test files this session names (a folder: all of them), unless slow tests are
    deselected or ``TPO_VENV_PREPARE=0``."""
    if "not slow" in (config.option.markexpr or "") or os.environ.get("TPO_VENV_PREPARE") == "0":
        return []
    files = set()
    for arg in config.args:
        path = pathlib.Path(arg.split("::", 1)[0])
        files |= set(NEEDS) if path.is_dir() else {path.stem} & set(NEEDS)
    steps = [s for f in sorted(files) for s in NEEDS[f]]  # in the order the suite reaches the files
    if os.environ.get("TPO_JAX_FLOOR_PY"):
        steps = [s for s in steps if s != "jax-floor"]  # the floor test uses the pythons named
    return steps


def start_preparing(config):
    """In the session's first process (pytest-xdist's controller, or a plain pytest) of a session that will run the
    packaging tests: build what they need in a background process (log: CACHE/prepare.log)."""
    global _preparer
    steps = [] if os.environ.get("PYTEST_XDIST_WORKER") or _preparer is not None else _session_needs(config)
    if not steps:
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(CACHE / "prepare.log", "w") as log:
        _preparer = subprocess.Popen(
            [sys.executable, "-m", "tests.fresh_venv", *steps],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_preparing():
    """At the session's end: a preparer still running (a session that ended first) is stopped with its pip; what it
    left unfinished has no ``.complete`` marker and is rebuilt next time."""
    if _preparer is not None and _preparer.poll() is None:
        import signal

        os.killpg(_preparer.pid, signal.SIGTERM)
        _preparer.wait(60)


def _prepare(steps):
    """Build each step on its own (a failed one is logged and left for its test to redo and report)."""
    import time

    for step in steps:
        t0 = time.perf_counter()
        try:
            STEPS[step]()
            print(f"{step}: ready after {time.perf_counter() - t0:.0f} s", flush=True)
        except BaseException as e:  # pytest.skip/fail raise BaseExceptions; the tests report them
            print(f"{step}: not built ({type(e).__name__}: {str(e)[-2000:]})", flush=True)


if __name__ == "__main__":
    _prepare(sys.argv[1:])
