"""Run the test suite as one pytest process per test file, two at a time (up to four on a larger machine), then
print a summary and each file's five slowest tests.

Why separate processes: every compiled XLA CPU program holds ~1k memory maps, and one process may hold
only vm.max_map_count (65,530) of them; a single pytest process that compiles every method, preset, demo
and book helper crashed natively in CI (SIGSEGV / SIGABRT inside XLA) once it crossed that limit.
``tpo_core.runtime.release_compiled`` now frees compiled programs at half the limit; a fresh process per
file also keeps a native crash, should one happen, to the file it happened in.

Why two at a time: the book build (one job: the two book files share one build and run in order) is the
longest job; it starts first and runs beside the other files one after another. The build itself executes
its pages two at a time on a 2-core machine (book/jb_parallel.py), so it uses the core the other files leave
idle once they are done.

The fast-compile XLA flag and the compile-cache policy are set in one place, ``tests/conftest.py``; this
runner only makes the session's private cache folder, shared by every file.

Usage: python tests/run_suite.py [--jobs N] [extra pytest args]   (`make test` runs it with no arguments)
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
# Slowest first, so the long jobs start at once; the book files build the book once and run in order.
ORDER = [("test_book_browser.py", "test_book_build.py"), ("test_reproduce.py",), ("test_train.py",), ("test_colab.py",),
         ("test_bridge_torch_ops.py",), ("test_bridge_trl.py",)]
_print_lock = threading.Lock()


def jobs_of(files: list[pathlib.Path]) -> list[tuple[pathlib.Path, ...]]:
    by_name = {f.name: f for f in files}
    jobs = []
    for group in ORDER:
        members = tuple(by_name.pop(n) for n in group if n in by_name)
        if members:
            jobs.append(members)
    jobs += [(f,) for f in sorted(by_name.values())]
    return jobs


def file_env(path: pathlib.Path) -> dict:
    return dict(os.environ)  # the fast-compile flag and the cache policy are set in tests/conftest.py


def run_file(path: pathlib.Path, argv: list[str]) -> tuple[str, int, float]:
    """One pytest process; its output is printed in one block when it ends (no interleaving)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "--timeout", "1800", "-p", "no:cacheprovider", "--durations", "5",
           str(path), *argv]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as out:
        rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env=file_env(path))
        out.seek(0)
        text = out.read()
    dt = time.perf_counter() - t0
    with _print_lock:
        print(f"\n=== {path.name} ({dt:.0f} s, {verdict(rc)})\n{text.rstrip()}", flush=True)
    return path.name, rc, dt


def run_job(job: tuple[pathlib.Path, ...], argv: list[str]) -> list[tuple[str, int, float]]:
    return [run_file(f, argv) for f in job]


def verdict(rc: int) -> str:
    if rc == 0:
        return "ok"
    if rc == 5:  # pytest: no tests collected (everything deselected by -m / -k)
        return "no tests"
    if rc < 0:
        return f"CRASHED ({signal.Signals(-rc).name})"
    return f"FAILED (exit {rc})"


def default_jobs() -> int:
    """Two at a time on a 2-core machine (the book's job beside the rest); one per core up to four on a larger one."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    return max(2, min(4, cores))


def main(argv: list[str]) -> int:
    n_jobs = default_jobs()
    if argv[:1] == ["--jobs"]:
        if len(argv) < 2 or not argv[1].isdigit() or int(argv[1]) < 1:
            print("run_suite: --jobs needs a whole number ≥ 1", file=sys.stderr)
            return 2
        n_jobs, argv = int(argv[1]), argv[2:]
    files = sorted(HERE.glob("test_*.py"))
    # One private persistent compile cache for every process the suite starts (servers, CLIs, notebook
    # kernels), so nothing else on the machine writes into the cache the tests read.
    own_cache = "TPO_JAX_CACHE" not in os.environ
    if own_cache:
        os.environ["TPO_JAX_CACHE"] = tempfile.mkdtemp(prefix="tpo-jax-cache-")
    try:
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=n_jobs) as pool:
            done = [r for f in [pool.submit(run_job, j, argv) for j in jobs_of(files)] for r in f.result()]
        return summarize(done, time.perf_counter() - t0, n_jobs)
    finally:
        if own_cache:
            shutil.rmtree(os.environ["TPO_JAX_CACHE"], ignore_errors=True)


def summarize(results: list[tuple[str, int, float]], wall: float, n_jobs: int) -> int:
    print(f"\n=== summary (one pytest process per file, {n_jobs} at a time)")
    failed = [name for name, rc, _ in results if rc not in (0, 5)]
    for name, rc, dt in sorted(results):
        print(f"{name:32s} {dt:7.1f} s  {verdict(rc)}")
    print(f"{'wall time':32s} {wall:7.1f} s")
    if failed:
        print("failed: " + ", ".join(failed))
        return 1
    if all(rc == 5 for _, rc, _ in results):
        print("no test ran in any file")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
