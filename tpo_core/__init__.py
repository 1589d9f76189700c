"""tpo_core — Target Policy Optimization (Kaddour 2026, arXiv 2604.06159) in JAX.

The package holds two layers, and an import contract (``[tool.importlinter]`` in ``pyproject.toml``, run by
``tests/test_architecture.py``) keeps the lower one free of the upper:

* **the library**, the modules at this level: the losses (:mod:`~tpo_core.losses`), the methods
  (:mod:`~tpo_core.methods`), the token tasks (:mod:`~tpo_core.tasks`), the models, the configurations, the
  jitted training (:mod:`~tpo_core.train`), the runtime, and the PyTorch bridge for TRL and verl
  (:mod:`tpo_core.bridge`, which imports no JAX). It imports nothing from the lab, ``demos``, ``benchmarks`` or
  ``book``: this is what ``pip install tpo_core`` users build on;
* **the lab**, :mod:`tpo_core.lab`: what reproduces, stores, judges and draws experiments (the presets and
  runner, statistics, the LLM experiment, reports, figures, MNIST, the CLI, the book's helpers). It imports
  the library; ``python -m tpo_core`` (:mod:`tpo_core.__main__`) is its command line.

Quick tour::

    import tpo_core
    q = tpo_core.tpo_target(logp_old, scores, eta=1.0)      # q ∝ p_old · exp(u/η), group on the last axis
    loss = tpo_core.tpo_loss(logp, logp_old, scores)         # -Σ q log softmax(logp), mean over leading axes
    cfg = tpo_core.TokenConfig(method="tpo", H=7, episodes=300)
    metrics = tpo_core.train_tokens(cfg, seeds=(0, 1))       # numpy arrays [seeds, episodes, ...]

The names below are imported on first use (PEP 562), so ``import tpo_core.bridge.torch_ops`` in a PyTorch
trainer never imports JAX.
"""

from __future__ import annotations

import importlib


def _version() -> str:
    """The version, written in one place, ``pyproject.toml``: of the source tree this package was imported from when
    there is one (``pyproject.toml`` beside the package, naming tpo_core), else of the installed distribution."""
    import pathlib
    import re

    source = pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml"
    text = source.read_text() if source.is_file() else ""
    declared = re.search(r'^version = "([^"]+)"', text, re.M) if re.search(r'^name = "tpo_core"', text, re.M) else None
    if declared:
        return declared.group(1)
    from importlib import metadata

    try:
        return metadata.version(__name__)
    except metadata.PackageNotFoundError:  # neither installed nor in its source tree (e.g. a copied folder)
        return "0+unknown"


__version__ = _version()

_EXPORTS = {
    "losses": (
        "clipped_surrogate",
        "cross_entropy_loss",
        "dapo_loss",
        "dg_loss",
        "dg_weights",
        "group_pg_loss",
        "grpo_advantages",
        "grpo_loss",
        "grpo_token_ratio_loss",
        "k3_kl",
        "batch_baseline_advantages",
        "pg_loss",
        "ppo_loss",
        "rebel_loss",
        "rloo_advantages",
        "rloo_loss",
        "standardize",
        "tpo_loss",
        "tpo_target",
        "tpo_token_loss",
        "vmpo_loss",
        "zero_variance",
    ),
    "methods": ("BANDIT_METHODS", "REGISTRY", "TOKEN_METHODS", "Method", "get_method"),
    "config": ("BanditConfig", "TokenConfig"),
    "runtime": ("enable_compile_cache",),
    "train": ("make_bandit_program", "make_token_program", "train_bandit", "train_tokens"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        module = importlib.import_module(f".{_WHERE[name]}", __name__)
        value = getattr(module, name)
        globals()[name] = value
        return value
    try:
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as e:
        if e.name == f"{__name__}.{name}":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        raise


def __dir__():
    return sorted(set(globals()) | set(_WHERE))
