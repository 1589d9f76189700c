"""Run the test suite one file per pytest process, then print a summary.

Why not one process: a single pytest process compiles several hundred XLA programs (every method,
both task families, the demo, the book helpers) next to Gradio's and uvicorn's threads. On the CI
machine that long-lived process crashed natively (SIGSEGV / SIGABRT inside XLA) late in the run,
while every file passes on its own. A fresh process per file keeps each one's compile state
small, and a native crash then names the file it happened in instead of killing the whole suite.

Usage: python tests/run_suite.py [extra pytest args]   (what `make test` runs)
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    files = sorted(HERE.glob("test_*.py"))
    # One private persistent compile cache for the servers, CLIs and notebook kernels that every file
    # starts (the pytest processes themselves never enable it: see conftest.py).
    own_cache = "TPO_JAX_CACHE" not in os.environ
    if own_cache:
        os.environ["TPO_JAX_CACHE"] = tempfile.mkdtemp(prefix="tpo-jax-cache-")
    try:
        return _run(files, argv)
    finally:
        if own_cache:
            shutil.rmtree(os.environ["TPO_JAX_CACHE"], ignore_errors=True)


def _run(files: list[pathlib.Path], argv: list[str]) -> int:
    results = []
    t_all = time.perf_counter()
    for f in files:
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "pytest", "-q", "--timeout", "1800", "-p", "no:cacheprovider", str(f), *argv]
        print(f"\n=== {f.name}", flush=True)
        rc = subprocess.call(cmd)
        dt = time.perf_counter() - t0
        results.append((f.name, rc, dt))
    print("\n=== summary (one pytest process per file)")
    failed = []
    for name, rc, dt in results:
        if rc == 0:
            verdict = "ok"
        elif rc == 5:  # pytest: no tests collected (e.g. everything deselected by -m)
            verdict = "no tests"
        elif rc < 0:
            verdict = f"CRASHED ({signal.Signals(-rc).name})"
        else:
            verdict = f"FAILED (exit {rc})"
        if rc not in (0, 5):
            failed.append(name)
        print(f"{name:32s} {dt:7.1f} s  {verdict}")
    print(f"{'total':32s} {time.perf_counter() - t_all:7.1f} s")
    if failed:
        print("failed: " + ", ".join(failed))
        return 1
    if all(rc == 5 for _, rc, _ in results):
        print("no test ran in any file")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
