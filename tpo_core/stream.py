"""Streaming several methods at once, chunk by chunk, for a UI that redraws between chunks and may stop there
(the Gradio demo and the notebook widget), over the engine's one chunk loop :func:`tpo_core.train.run_chunks`
and its chunk-size policy :func:`tpo_core.train.chunk_sizes`.

A task family is chosen once, as a :class:`Family` (``TOKEN``, ``BANDIT``; :func:`family` finds a
config's): its name as the UI shows it, its ``kind`` as the reproduction records it, the unit of its curves and
the metric that measures its error. A :class:`Request` holds one config per method; :func:`stream` trains
them interleaved and yields the history after every round. Programs are compiled once per (config's static
part, seeds, chunk length): the first call of each holds a lock, so a user and a startup warm-up never compile
the same thing twice. This module imports only the library (no figures, no data sets: the bandit's data set is
passed in by the caller).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Iterator

import numpy as np

from . import methods as M
from . import runtime
from .config import BanditConfig, TokenConfig
from .constants import MNIST_BANDIT, TOKEN_REVERSAL
from .train import chunk_sizes, chunk_to_host, make_bandit_program, make_token_program, run_chunks

CHUNK = 5  # token episodes per streamed update (after the first, 1-episode chunk)
BANDIT_EVAL_EVERY = 100  # bandit steps per evaluation block of a streamed run
BANDIT_CHUNK = 5  # bandit blocks per streamed update


# --------------------------------------------------------------------------------------------
# task families, chosen once
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Family:
    """One task family: how a UI names it and how its runs are counted and measured."""

    name: str  # as the demo and the widget show it
    kind: str  # as the reproduction records a run ("token" | "bandit")
    config: type  # its configuration class
    unit: str  # what the UI counts: "episode" | "step"
    block: int  # UI units per program step (an episode; a streamed bandit block of BANDIT_EVAL_EVERY steps)
    chunk: int  # program steps per streamed update after the first
    error_key: str  # the metric of its error curve
    zero_label: str  # what its third plot shows
    cli: str  # as the command line names it (``tpo train --task``)

    @property
    def methods(self) -> tuple:
        """The registry's methods that run on this family."""
        return M.TOKEN_METHODS if self.config is TokenConfig else M.BANDIT_METHODS

    @property
    def is_token(self) -> bool:
        return self.config is TokenConfig


TOKEN = Family(
    TOKEN_REVERSAL, "token", TokenConfig, "episode", 1, CHUNK, "error", "zero-variance groups", cli="reversal"
)
BANDIT = Family(
    MNIST_BANDIT,
    "bandit",
    BanditConfig,
    "step",
    BANDIT_EVAL_EVERY,
    BANDIT_CHUNK,
    "test_error",
    "training error",
    cli="mnist",
)
FAMILIES = {f.name: f for f in (TOKEN, BANDIT)}


def family(of) -> Family:
    """The family of a config, a family name, a ``kind``, a command-line name or a :class:`Request`/history (its
    ``task``)."""
    if isinstance(of, Family):
        return of
    if isinstance(of, (TokenConfig, BanditConfig)):
        return TOKEN if isinstance(of, TokenConfig) else BANDIT
    if isinstance(of, dict):
        of = of["task"]
    elif isinstance(of, Request):
        of = of.task
    for f in FAMILIES.values():
        if of in (f.name, f.kind, f.cli):
            return f
    raise ValueError(f"task must be one of {', '.join(FAMILIES)}, got {of!r}")


# --------------------------------------------------------------------------------------------
# several methods, interleaved
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Request:
    """A validated training request: one config per method."""

    task: str
    configs: tuple  # ((method, TokenConfig | BanditConfig), ...)
    seeds: tuple
    total: int  # episodes (token) or evaluation blocks (bandit)

    @property
    def family(self) -> Family:
        """Its task's family: the unit of ``total``, how it samples (:class:`Family`)."""
        return family(self.task)


_compiled: set = set()
runtime.register_cache(_compiled.clear)  # after tpo_core frees its programs, nothing here is warm
_locks: dict = collections.defaultdict(threading.Lock)
_guard = threading.Lock()
_cache_on = False


def program_for(cfg, dataset=None):
    """The (lru-cached) program of ``cfg`` (a bandit config trains on ``dataset``); turns JAX's persistent compile
    cache on at first use, so a configuration compiled by any earlier process (warm-up, tests, a previous server)
    loads from it instead of compiling."""
    global _cache_on
    if not _cache_on:
        runtime.enable_compile_cache()
        _cache_on = True
    if isinstance(cfg, TokenConfig):
        return make_token_program(cfg)
    if dataset is None:
        raise ValueError("dataset: a bandit configuration needs its data set")
    return make_bandit_program(cfg, dataset)


def is_warm(cfg, n_seeds: int, n: int) -> bool:
    """Whether a chunk of ``n`` episodes for ``n_seeds`` seeds is compiled: programs are keyed on the static
    part of the config only (η, lr, β, ... are traced), so a new η at a compiled shape is warm."""
    return (cfg.static, n_seeds, n) in _compiled


def run_chunk(program, cfg, carry, start: int, n: int, n_seeds: int):
    """One chunk, blocking until its metrics are on the host (numpy); its first call per shape holds a lock."""
    key = (cfg.static, n_seeds, n)
    if key in _compiled:
        return chunk_to_host(program, carry, start, n)
    with _guard:
        lock = _locks[key]
    with lock:
        out = chunk_to_host(program, carry, start, n)
        _compiled.add(key)
    return out


def schedule(total: int, chunk: int) -> list:
    """A UI's chunks: 1, then ``chunk`` repeatedly, then 1s for the remainder (:func:`tpo_core.train.chunk_sizes` with
    ``first=1``): two compiled shapes per config."""
    return chunk_sizes(total, chunk, first=1)


def warm(req: Request, dataset=None) -> float:
    """Compile both chunk shapes of every config in ``req`` (startup, background thread); seconds spent."""
    t0 = time.perf_counter()
    chunk = req.family.chunk
    for _, cfg in req.configs:
        program = program_for(cfg, dataset)
        carry = program.init(list(req.seeds))
        for n in sorted({1, min(chunk, req.total)}):
            if not is_warm(cfg, len(req.seeds), n):
                run_chunk(program, cfg, carry, 0, n, len(req.seeds))
    return time.perf_counter() - t0


KEEP = (
    "error",
    "test_error",
    "train_error",
    "grad_norm",
    "step_norm",
    "zero_var_frac",
    "success_mass",
    "track_p",
    "track_q",
    "track_scores",
    "track_informative",
)


def stream(req: Request, chunk: int | None = None, dataset=None) -> Iterator[dict]:
    """Train every method of ``req`` interleaved (one chunk each per round, through :func:`tpo_core.train.run_chunks`); yield
    the history so far after each round.

    History: ``{"done": int, "total": int, "seconds": float, "compiling": bool,
    "metrics": {method: {name: array [S, done, ...]}}}``. The first yield (done = 0) comes before any
    compute, so the UI can say what is happening.
    """
    chunk = chunk or req.family.chunk
    n_seeds = len(req.seeds)
    t0 = time.perf_counter()
    programs = {m: program_for(cfg, dataset) for m, cfg in req.configs}
    plan = schedule(req.total, chunk)
    cold = any(not is_warm(cfg, n_seeds, n) for _, cfg in req.configs for n in set(plan))
    hist = {
        "done": 0,
        "total": req.total,
        "seconds": 0.0,
        "compiling": cold,
        "task": req.task,
        "unit": req.family.unit,
        "seeds": req.seeds,
        "metrics": {m: {} for m, _ in req.configs},
        "epochs": {m: getattr(cfg, "n_epochs", 1) for m, cfg in req.configs},
    }
    yield hist
    loops = {
        m: run_chunks(
            programs[m],
            programs[m].init(list(req.seeds)),
            plan,  # init: jitted once per program
            call=lambda c, s, n, p=programs[m], cfg=cfg: run_chunk(p, cfg, c, s, n, n_seeds),
        )
        for m, cfg in req.configs
    }
    for _ in plan:
        for m, _cfg in req.configs:
            _, done, metrics = next(loops[m])
            store = hist["metrics"][m]
            for k in KEEP:
                if k in metrics:
                    store[k] = metrics[k] if k not in store else np.concatenate([store[k], metrics[k]], axis=1)
        hist = dict(hist, done=done, seconds=time.perf_counter() - t0, compiling=False)
        yield hist
