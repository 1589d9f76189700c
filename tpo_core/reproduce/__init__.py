"""Reproduce the paper (arXiv 2604.06159 §5): presets, the published numbers, statistics, the reference
implementation's curves and a resumable runner.

    python -m tpo_core reproduce --list
    python -m tpo_core reproduce table3 --budget paper-h10 --out results/table3_paper_h10
    python -m tpo_core report results --out results/REPORT.md

Modules, one job each: :mod:`~tpo_core.reproduce.paper_numbers` (the paper's tables, held once),
:mod:`~tpo_core.reproduce.presets` (runs per budget), :mod:`~tpo_core.reproduce.stats` (seed SE, verdicts),
:mod:`~tpo_core.reproduce.reference` (the reference code's per-seed curves), :mod:`~tpo_core.reproduce.runner`
(training, resuming, summaries).
"""
from . import paper_numbers, stats
from .presets import BUDGETS, PRESETS, Preset, Run, check_budget, get, list_text
from .runner import run_preset, summarize

__all__ = ["BUDGETS", "PRESETS", "Preset", "Run", "check_budget", "get", "list_text", "paper_numbers",
           "run_preset", "stats", "summarize"]
