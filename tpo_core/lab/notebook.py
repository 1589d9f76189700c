"""Helpers for the book's notebooks (also used in Colab, where only the installed package exists).

``QUICK`` budgets: the quick (CPU-sized) budget is the default on every backend, Colab's GPUs included;
``TPO_QUICK=0`` selects the full chapter budget (the reproduction appendix states each one and its expected time).
"""

from __future__ import annotations

import contextlib
import os
import time
import tomllib
from importlib import resources

import jax

from tpo_core import train
from tpo_core.runtime import enable_compile_cache

from . import figures


def quick_mode() -> bool:
    flag = os.environ.get("TPO_QUICK")
    return flag is None or flag not in ("0", "false", "False", "")


def setup(verbose: bool = True) -> bool:
    """First cell of every chapter: plotly renderer, compile cache, devices. Returns QUICK."""
    figures.setup()
    enable_compile_cache()
    quick = quick_mode()
    if verbose:
        print(f"JAX {jax.__version__} on {jax.default_backend().upper()}: {jax.devices()}")
        print("budget:", "quick (the default; set TPO_QUICK=0 for the full chapter)" if quick else "full")
    return quick


def budget(quick, full):
    """Pick the quick or the full value of a budget."""
    return quick if quick_mode() else full


def _live_budgets() -> dict[str, dict]:
    """live_budgets.toml (package data), each chapter's ``work``: the sizes its budgets set, in their order."""
    table = tomllib.loads(resources.files(__package__).joinpath("live_budgets.toml").read_text(encoding="utf-8"))
    for chapter, b in table.items():
        if b["quick"].keys() != b["full"].keys():
            raise RuntimeError(f"live_budgets.toml: chapter {chapter}'s quick and full budgets set different sizes")
        b["work"] = tuple(b["quick"])
    return table


# The quick and full budgets of each experiment chapter's live run ("Run it yourself"), in one place
# (live_budgets.toml says how the chapters and the reproduction appendix use them).
LIVE_BUDGETS: dict[str, dict] = _live_budgets()


def live_budget(chapter: str) -> dict:
    """The budget of ``chapter``'s live run (a key of :data:`LIVE_BUDGETS`, e.g. ``"06"``) in this mode."""
    if chapter not in LIVE_BUDGETS:
        raise ValueError(f"chapter must be one of {sorted(LIVE_BUDGETS)}, got {chapter!r}")
    b = LIVE_BUDGETS[chapter]
    return dict(budget(b["quick"], b["full"]))


def budget_work(chapter: str, which: str) -> float:
    """The cost measure (product of the ``work`` keys) of ``chapter``'s ``which`` ("quick" | "full") budget."""
    if which not in ("quick", "full"):
        raise ValueError(f"which must be 'quick' or 'full', got {which!r}")
    b = LIVE_BUDGETS[chapter]
    out = 1.0
    for k in b["work"]:
        out *= b[which][k]
    return out


@contextlib.contextmanager
def stopwatch(label: str):
    """Time a block (call jax.block_until_ready inside on what you produce)."""
    t0 = time.perf_counter()
    yield
    print(f"{label}: {time.perf_counter() - t0:.1f} s")


def timed_run(program, seeds, n, points=None):
    """Run a :class:`tpo_core.train.Program` and report compile time apart from run time.

    Compiles (``lower().compile()``) first, then runs; returns metrics as numpy [S, n, ...] (or
    [P, S, n, ...] for a sweep: ``points`` is a list of knob overrides, e.g. ``[{"eta": 0.5}, {"eta": 2}]``).
    """
    import numpy as np

    seeds = list(seeds)
    carry = jax.block_until_ready(program.init(seeds, points))
    t0 = time.perf_counter()
    compiled = program.chunk.lower(carry, 0, n, *program.data).compile()
    t1 = time.perf_counter()
    # the library's chunk loop (tpo_core.train.run_chunks) over one chunk, run by the program compiled above
    [(carry, _, metrics)] = train.run_chunks(program, carry, [n], call=lambda c, s, _: compiled(c, s, *program.data))
    metrics = jax.block_until_ready(metrics)
    t2 = time.perf_counter()
    runs = len(seeds) * (len(points) if points else 1)
    print(f"compile {t1 - t0:.1f} s, run {t2 - t1:.1f} s ({runs} runs x {n} {program.unit})")
    metrics = jax.tree.map(np.asarray, metrics)
    return train.by_point(metrics, len(points), len(seeds)) if points else metrics


# A Colab T4 against the 2-core CPU that trained the committed results/: an ASSUMED ratio, not a measurement
# (no T4 timing is committed). Basis: the rate the CPU sustains on a Table-3 episode on an idle host (the
# episode's FLOPs, counted from the model's shapes, over its seconds per episode from `python -m
# benchmarks.bench_train`, whose results file records the host's load) against a quarter of a T4's fp32 peak (its
# datasheet figure; these small vmapped programs use a fraction of it), rounded down. A GPU results file
# (benchmarks/gpu_table3.py, run on a T4) would replace it with a measured ratio.
T4_SPEEDUP_ASSUMED = 20.0


def duration_text(seconds: float) -> str:
    """A duration in words: "40 s", "12 min", "3.5 h"."""
    if not seconds >= 0:
        raise ValueError(f"seconds must be >= 0, got {seconds!r}")
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def t4_estimate(cpu_seconds: float) -> str:
    """The expected time on a Colab T4 of work that takes ``cpu_seconds`` on the 2-core CPU that trained
    ``results/`` (measured there, or extrapolated from a measurement), as one line that states its basis."""
    t4 = cpu_seconds / T4_SPEEDUP_ASSUMED
    return (
        f"≈ {duration_text(t4)} on a Colab T4 (an estimate: ≈ {duration_text(cpu_seconds)} on a 2-core CPU, "
        f"divided by an assumed {T4_SPEEDUP_ASSUMED:g}× speed-up; not measured on a T4)"
    )
