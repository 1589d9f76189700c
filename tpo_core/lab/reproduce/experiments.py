"""One registry of every experiment, JAX and LLM alike, and the protocol each of them keeps.

    python -m tpo_core reproduce --list          # list_text(): every experiment and its budgets
    python -m tpo_core reproduce NAME --budget B # get(NAME).train(B, out, ...)
    python -m tpo_core report results            # get(summary["preset"]) says how its rows read

The families: the JAX presets (:data:`tpo_core.lab.reproduce.presets.PRESETS`, each a
:class:`~.presets.Preset`, trained by :mod:`~tpo_core.lab.reproduce.runner`, whose ``EXPERIMENTS`` wraps each in
a ``JaxExperiment``) and the LLM experiments (:mod:`tpo_core.lab.llm.rlvr`, :mod:`tpo_core.lab.llm.sparse`,
:mod:`tpo_core.lab.llm.spread`, trained through PyTorch and TRL). Each family module holds an ``EXPERIMENTS``
dict (name → experiment). The LLM modules import NumPy only at import time (PyTorch and TRL load when a run
starts), so listing, looking up and reporting every experiment imports no torch.
"""

from __future__ import annotations

import importlib
import pathlib
from typing import Mapping, Optional, Protocol, Sequence, runtime_checkable

__all__ = [
    "Experiment",
    "FAMILIES",
    "all_experiments",
    "names",
    "get",
    "find",
    "list_text",
    "refuse_options",
    "labelled_rows",
]

# the modules that hold an ``EXPERIMENTS`` dict, in the order --list and the report show them
FAMILIES = (".runner", "..llm.rlvr", "..llm.sparse", "..llm.spread")


@runtime_checkable
class Experiment(Protocol):
    """What every experiment is and does: a claim, named budgets, a plan per budget, training into a results
    folder (run files + ``summary.json``), and how its summary reads in the report.

    A :class:`typing.Protocol`, not an ABC: the two families share no state and no code path worth inheriting
    (a JAX preset is a frozen dataclass whose runs the JAX runner trains, and ``runner.JaxExperiment`` adds
    ``train`` to it; an LLM experiment drives TRL's trainers), so each conforms structurally and ``isinstance(x, Experiment)`` checks it (the registry's test
    does). The small pieces they do share are the functions of this module (:func:`refuse_options`,
    :func:`labelled_rows`).

    ``train`` options beyond the common ones (``seeds``, ``only``, ``partial``, ``progress``, ``command``)
    arrive as ``**options`` (the JAX engine's ``chunk`` and ``distributed``); an experiment refuses an
    option that does not apply to it with one ``ValueError`` naming it (:func:`refuse_options`), so the CLI
    passes the flags it was given without knowing which experiment takes which.
    """

    name: str
    title: str
    claim: str  # what the paper says (or, beyond the paper, the question)
    budgets: tuple  # the budget names, e.g. ("smoke", "cpu", "paper")

    def budget_note(self, budget: str) -> str:
        """What ``budget`` trains, in one line (model, steps, seeds, and how it differs from the paper)."""

    def plan(self, budget: str) -> list:
        """What ``budget`` trains: the runs (JAX: :class:`~.presets.Run`; LLM: one dict per arm and seed)."""

    def default_out(self, budget: str) -> pathlib.Path:
        """The results folder when none is given."""

    def train(
        self,
        budget: str,
        out=None,
        *,
        seeds: Optional[int] = None,
        only: Optional[Sequence[str]] = None,
        partial: bool = False,
        progress: bool = True,
        command: Optional[str] = None,
        **options,
    ) -> Optional[dict]:
        """Train what is not yet in ``out`` and return the summary (also ``out/summary.json``), or None when
        this process writes no summary (``only`` a subset whose other runs are not done, or not the main
        process). ``only`` names runs or methods (experiment-specific), ``partial`` summarises what is
        finished and trains nothing."""

    def metric_label(self, metric: str) -> str:
        """The report's name of a summary metric."""

    def rows(self, summary: dict) -> list[dict]:
        """The summary's rows as the report tabulates them: each row's fields plus ``metric_label``."""

    def notes(self, summary: dict) -> str:
        """What trained the summary's runs (the engine and its results version, or the PyTorch side)."""

    def list_text(self) -> str:
        """Lines for ``--list``: the name and title, then one line per budget."""


def all_experiments() -> dict[str, Experiment]:
    """{name: experiment} over every family, in :data:`FAMILIES` order (read on every call: a family's dict
    may gain an experiment, e.g. in a test)."""
    found: dict[str, Experiment] = {}
    for family in FAMILIES:
        module = importlib.import_module(family, __package__)
        for name, experiment in module.EXPERIMENTS.items():
            if name in found:
                raise RuntimeError(f"experiment {name!r} is registered twice ({family})")
            found[name] = experiment
    return found


def names() -> list[str]:
    return list(all_experiments())


def find(name) -> Optional[Experiment]:
    """The experiment called ``name``, or None (a summary of an experiment this package no longer has)."""
    return all_experiments().get(name)


def get(name: str) -> Experiment:
    experiments = all_experiments()
    if name not in experiments:
        raise ValueError(f"name must be one of {', '.join(experiments)}, got {name!r}")
    return experiments[name]


def list_text() -> str:
    return "\n".join(e.list_text() for e in all_experiments().values())


def budget_lines(budgets: Mapping[str, str]) -> list[str]:
    """``--list`` lines of one experiment's budgets, ``{budget: what it trains}``, indented under its name."""
    return [f"{'':12s}   {b:9s}: {text}" for b, text in budgets.items()]


def check_budget(experiment: Experiment, budget: str) -> str:
    if budget not in experiment.budgets:
        raise ValueError(f"budget must be one of {', '.join(experiment.budgets)} for {experiment.name}, got {budget!r}")
    return budget


def refuse_options(experiment: Experiment, options: Mapping, why: str, allowed: Sequence[str] = ()) -> None:
    """One ``ValueError`` for the first option given (not None, not False) that ``experiment`` does not take."""
    for key, value in options.items():
        if key not in allowed and value is not None and value is not False:
            raise ValueError(f"{key} does not apply to {experiment.name} ({why})")


def labelled_rows(summary: dict, label) -> list[dict]:
    """``summary["rows"]``, each with ``metric_label`` = ``label(row["metric"])``."""
    return [dict(r, metric_label=label(r["metric"])) for r in summary["rows"]]
