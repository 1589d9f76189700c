"""What every benchmark writes: one results file, ``benchmarks/results/<name>.json``, written atomically, that opens
with the same header, so a figure can always be traced to the command, the day, the commit and the host that gave it.

The header (``REQUIRED`` keys): ``command`` (what to run to measure it again), ``date`` (UTC day), ``commit`` (short
hash of the checkout, ``None`` outside git), ``machine`` (``cpus``, the load average at the start and at the end,
and a ``note`` saying what else ran beside the benchmark). The rest of the file is the benchmark's own figures;
``benchmarks/report.py`` renders every results file into ``benchmarks/results/README.md`` and the README's
Performance table.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import shlex
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
REQUIRED = ("command", "date", "commit", "machine")

SHARED_NOTE = (
    "a shared machine: other jobs ran beside the benchmark (see the load averages); the project's long "
    "reproductions (`tpo_core reproduce`, at nice 10) were running"
)
IDLE_NOTE = "nothing else ran beside the benchmark (see the load averages)"


def git_commit() -> str | None:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        return None


def command_line(name: str, argv=None, module: bool = False) -> str:
    """The command that reproduces this run, with the arguments it was given: ``python -m benchmarks.<name> …``
    (``module``) or ``python benchmarks/<name>.py …``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    head = ["python", "-m", f"benchmarks.{name}"] if module else ["python", f"benchmarks/{name}.py"]
    return " ".join([*head, *map(shlex.quote, argv)])


def header(command: str, note: str | None = None) -> dict:
    """The results file's opening keys, taken when the benchmark starts. ``note``: what ran beside it; by default
    read from ``$TPO_BENCH_NOTE``, else the shared-machine note (this project's machine is shared)."""
    return {
        "command": command,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "commit": git_commit(),
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_start": list(os.getloadavg()),
            "note": note or os.environ.get("TPO_BENCH_NOTE") or SHARED_NOTE,
        },
    }


def matmul_gflops(n: int = 2048, repeat: int = 5) -> float:
    """The host's speed at the moment: the best of ``repeat`` float32 ``n × n`` matrix products through XLA, in
    GFLOP/s (2n³ flops each). The same host gives figures that differ by the day's load; this one says how fast
    it was when the rest of the file was measured."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    mm = jax.jit(jnp.matmul)
    jax.block_until_ready(mm(a, a))
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        jax.block_until_ready(mm(a, a))
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


def finish(result: dict) -> dict:
    """Close the header: the load average at the end."""
    result["machine"]["loadavg_end"] = list(os.getloadavg())
    return result


def write(name: str, result: dict, out: pathlib.Path | None = None) -> pathlib.Path:
    """Write ``result`` to ``out`` (default ``benchmarks/results/<name>.json``) atomically; refuses one without
    the header."""
    from tpo_core.lab.atomic_io import write_json

    missing = [k for k in REQUIRED if k not in result]
    if missing:
        raise ValueError(f"result: a results file needs {', '.join(REQUIRED)}; missing {', '.join(missing)}")
    path = pathlib.Path(out) if out is not None else RESULTS / f"{name}.json"
    write_json(path, result)
    m = result["machine"]
    print(
        f"{result['command']} · {result['date']} · commit {result['commit']} · {m['cpus']} CPUs, load average "
        f"{m['loadavg_start'][0]:.1f} → {m.get('loadavg_end', [float('nan')])[0]:.1f}"
        + (f", 2048² matmul {m['matmul_gflops']:.0f} GFLOP/s" if m.get("matmul_gflops") else ""),
        flush=True,
    )
    return path


def load(path: pathlib.Path) -> dict:
    return json.loads(pathlib.Path(path).read_text())
