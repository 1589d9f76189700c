"""Reproduce the paper's experiments (arXiv 2604.06159: MNIST §3.3, the token tasks §3.4–3.7, the LLM runs §3.8,
the ablations §4): presets, the published numbers, statistics, the reference implementation's curves and a
resumable runner.

    python -m tpo_core reproduce --list
    python -m tpo_core reproduce table3 --budget paper-h10 --out results/table3_paper_h10
    python -m tpo_core reproduce llm_graph_coloring --budget cpu      # PyTorch + TRL (tpo_core.lab.llm.rlvr)
    python -m tpo_core report results --out results/REPORT.md

Modules, one job each: :mod:`~tpo_core.lab.reproduce.experiments` (the one registry of every experiment, JAX and
LLM, and the protocol each keeps), :mod:`~tpo_core.lab.reproduce.paper_numbers` (the paper's tables, held once),
:mod:`~tpo_core.lab.reproduce.presets` (runs per budget), :mod:`~tpo_core.lab.reproduce.stats` (seed SE, verdicts),
:mod:`~tpo_core.lab.reproduce.reference` (the reference code's per-seed curves), :mod:`~tpo_core.lab.reproduce.seedwise`
(seed-by-seed statistics, rank and Fisher tests, and the rule for "consistent" / "differs" / "too few seeds"),
:mod:`~tpo_core.lab.reproduce.runner` (training, resuming, summaries).

``paper_numbers`` and ``stats`` need only NumPy and are imported at once; the presets and the runner build JAX
programs and are imported on first use, so the PyTorch side (:mod:`tpo_core.lab.llm`) can use the paper's numbers
and the seed SE without importing JAX.
"""

import importlib

from . import paper_numbers, stats

_LAZY = {
    "BUDGETS": "presets",
    "PRESETS": "presets",
    "Preset": "presets",
    "Run": "presets",
    "check_budget": "presets",
    "get": "presets",
    "list_text": "presets",
    "run_preset": "runner",
    "summarize": "runner",
}
_SUBMODULES = ("experiments", "presets", "runner", "reference", "committed", "seedwise")

__all__ = [
    "BUDGETS",
    "PRESETS",
    "Preset",
    "Run",
    "check_budget",
    "get",
    "list_text",
    "paper_numbers",
    "run_preset",
    "stats",
    "summarize",
]


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
