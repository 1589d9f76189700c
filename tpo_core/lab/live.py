"""Live training, chunk by chunk: the streaming engine of the Gradio demo (``demos/app.py``, which imports it
through ``demos/training.py``) and of the notebook widget (:mod:`tpo_core.lab.widget`).

A :class:`Request` (from :func:`validate`, which turns raw UI values into configs or raises ``InputError``
naming the input) holds one config per method; :func:`stream` trains the methods interleaved, one chunk each,
and yields the history after every round, so a UI can redraw between chunks (and stop there). Each method is a
:func:`tpo_core.train.make_token_program` (or bandit) program; chunks are 1 episode first (so the first points
arrive within a second on a warm process), then ``CHUNK`` episodes; a ragged remainder is run as 1-episode
chunks, so a configuration compiles exactly two chunk shapes (:func:`schedule`). The figure builders
(``error_figure``, ``grad_figure``, ``zero_var_figure``, ``pq_figure``) turn one history
snapshot into plotly figures. Nothing here imports gradio or ``demos``: the package alone (as Colab installs it)
runs it.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Iterator

import numpy as np

from tpo_core import methods as M
from tpo_core import runtime
from tpo_core.config import BanditConfig, TokenConfig

from .explorer import InputError, check_eta, check_int
from .figures import color, curves_figure

TASKS = ("token reversal", "MNIST bandit")
REWARDS = ("terminal", "sequential", "bag")
MAX_TRAIN_K = 16
MAX_EPISODES = 2000
MAX_BANDIT_STEPS = 10_000
MAX_B = 256
MAX_SEEDS = 4
MAX_METHODS = 4
H_MIN, H_MAX = 2, 10
CHUNK = 5  # token episodes per streamed update (after the first, 1-episode chunk)
BANDIT_EVAL_EVERY = 100  # bandit steps per evaluation block
BANDIT_CHUNK = 5  # bandit blocks per streamed update


@dataclasses.dataclass(frozen=True)
class Request:
    """A validated training request: one config per method."""

    task: str
    configs: tuple  # ((method, TokenConfig | BanditConfig), ...)
    seeds: tuple
    total: int  # episodes (token) or evaluation blocks (bandit)

    @property
    def unit(self) -> str:
        return "episode" if self.task == "token reversal" else "step"


def validate(
    task, methods, reward="terminal", H=6, B=100, K=8, eta=1.0, episodes=300, n_seeds=1, seed=0, bandit_steps=3000
) -> Request:
    """Turn raw UI values into a :class:`Request`, or raise ``InputError`` (a ``ValueError``) naming the input."""
    if task not in TASKS:
        raise InputError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    if isinstance(methods, str):
        methods = [methods]
    if methods is not None and not (isinstance(methods, (list, tuple)) and all(isinstance(m, str) for m in methods)):
        raise InputError(f"methods must be a list of method names, got {methods!r}")
    methods = list(dict.fromkeys(methods or []))
    if not methods:
        raise InputError("methods: pick at least one method")
    if len(methods) > MAX_METHODS:
        raise InputError(
            f"methods: pick at most {MAX_METHODS} at once (each one trains its own model), got {len(methods)}"
        )
    eta_f = check_eta(eta)
    n_seeds = check_int("seeds", n_seeds, 1, MAX_SEEDS)
    seed = check_int("seed", seed, 0, 2**31 - 1)
    seeds = tuple(range(seed, seed + n_seeds))
    configs = []
    if task == "token reversal":
        if reward not in REWARDS:
            raise InputError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}")
        H = check_int("H", H, H_MIN, H_MAX)
        K = check_int("K", K, 2, MAX_TRAIN_K)
        B = check_int("B", B, 1, MAX_B)
        episodes = check_int("episodes", episodes, 1, MAX_EPISODES)
        for m in methods:
            if m not in M.TOKEN_METHODS:
                raise InputError(
                    f"methods: {m!r} does not run on the token task; choose from {', '.join(M.TOKEN_METHODS)}"
                )
            if M.REGISTRY[m].dense_only and reward not in ("bag", "sequential"):
                raise InputError(f"methods: {m} needs a dense reward (bag or sequential), but reward = {reward}")
            try:
                cfg = TokenConfig(method=m, reward=reward, H=H, B=B, K=K, eta=eta_f, episodes=episodes)
            except ValueError as e:
                raise InputError(str(e)) from None
            configs.append((m, cfg.interaction_matched()))
        return Request(task, tuple(configs), seeds, episodes)
    steps = check_int("MNIST steps", bandit_steps, BANDIT_EVAL_EVERY, MAX_BANDIT_STEPS)
    if steps % BANDIT_EVAL_EVERY:
        raise InputError(f"MNIST steps must be a multiple of {BANDIT_EVAL_EVERY}, got {steps}")
    for m in methods:
        if m not in M.BANDIT_METHODS:
            raise InputError(
                f"methods: {m!r} does not run on the MNIST bandit; choose from {', '.join(M.BANDIT_METHODS)}"
            )
        configs.append((m, BanditConfig(method=m, steps=steps, eta=eta_f, eval_every=BANDIT_EVAL_EVERY)))
    return Request(task, tuple(configs), seeds, steps // BANDIT_EVAL_EVERY)


# --------------------------------------------------------------------------------------------
# programs, compiled once per (config, seeds, chunk length); the first call of each holds a lock
# so a user and the startup warm-up never compile the same thing twice
# --------------------------------------------------------------------------------------------
_compiled: set = set()
runtime.register_cache(_compiled.clear)  # after tpo_core frees its programs, nothing here is warm
_locks: dict = collections.defaultdict(threading.Lock)
_guard = threading.Lock()
_dataset = None


def mnist_dataset():
    global _dataset
    with _guard:
        if _dataset is None:
            from . import mnist

            _dataset = mnist.load()
        return _dataset


_cache_on = False


def program_for(cfg):
    """The (lru-cached) program of ``cfg``; turns JAX's persistent compile cache on at first use, so
    a configuration compiled by any earlier process (warm-up, tests, a previous server) loads from it instead
    of compiling."""
    global _cache_on
    from tpo_core.runtime import enable_compile_cache
    from tpo_core.train import make_bandit_program, make_token_program

    if not _cache_on:
        enable_compile_cache()
        _cache_on = True

    if isinstance(cfg, TokenConfig):
        return make_token_program(cfg)
    return make_bandit_program(cfg, mnist_dataset())


def is_warm(cfg, n_seeds: int, n: int) -> bool:
    """Whether a chunk of ``n`` episodes for ``n_seeds`` seeds is compiled: programs are keyed on the static
    part of the config only (η, lr, β, ... are traced), so a new η at a compiled shape is warm."""
    return (cfg.static, n_seeds, n) in _compiled


def run_chunk(program, cfg, carry, start: int, n: int, n_seeds: int):
    """One chunk, blocking until its metrics are on the host (numpy)."""
    import jax

    def call():
        c, m = program.chunk(carry, start, n, *program.data)
        return c, jax.tree.map(np.asarray, m)

    key = (cfg.static, n_seeds, n)
    if key in _compiled:
        return call()
    with _guard:
        lock = _locks[key]
    with lock:
        out = call()
        _compiled.add(key)
    return out


def schedule(total: int, chunk: int) -> list:
    """1, then ``chunk`` repeatedly, then 1s for the remainder: two compiled shapes per config."""
    if total <= 0:
        return []
    rest = total - 1
    return [1] + [chunk] * (rest // chunk) + [1] * (rest % chunk)


def warm(req: Request) -> float:
    """Compile both chunk shapes of every config in ``req`` (startup, background thread); seconds spent."""
    t0 = time.perf_counter()
    chunk = CHUNK if req.task == "token reversal" else BANDIT_CHUNK
    for _, cfg in req.configs:
        program = program_for(cfg)
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


def stream(req: Request, chunk: int | None = None) -> Iterator[dict]:
    """Train every method of ``req`` interleaved; yield the history so far after each round.

    History: ``{"done": int, "total": int, "seconds": float, "compiling": bool,
    "metrics": {method: {name: array [S, done, ...]}}}``. The first yield (done = 0) comes before any
    compute, so the UI can say what is happening.
    """
    chunk = chunk or (CHUNK if req.task == "token reversal" else BANDIT_CHUNK)
    n_seeds = len(req.seeds)
    t0 = time.perf_counter()
    programs = {m: program_for(cfg) for m, cfg in req.configs}
    plan = schedule(req.total, chunk)
    cold = any(not is_warm(cfg, n_seeds, n) for _, cfg in req.configs for n in set(plan))
    hist = {
        "done": 0,
        "total": req.total,
        "seconds": 0.0,
        "compiling": cold,
        "task": req.task,
        "unit": req.unit,
        "seeds": req.seeds,
        "metrics": {m: {} for m, _ in req.configs},
        "epochs": {m: getattr(cfg, "n_epochs", 1) for m, cfg in req.configs},
    }
    yield hist
    carries = {m: programs[m].init(list(req.seeds)) for m, _ in req.configs}  # init is jitted once per program
    done = 0
    for n in plan:
        for m, cfg in req.configs:
            carries[m], metrics = run_chunk(programs[m], cfg, carries[m], done, n, n_seeds)
            store = hist["metrics"][m]
            for k in KEEP:
                if k in metrics:
                    store[k] = metrics[k] if k not in store else np.concatenate([store[k], metrics[k]], axis=1)
        done += n
        hist = dict(hist, done=done, seconds=time.perf_counter() - t0, compiling=False)
        yield hist


# --------------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------------
def _x(hist, T):
    if hist["task"] == "token reversal":
        return np.arange(T)
    return (np.arange(T) + 1) * BANDIT_EVAL_EVERY


def _empty(title, note=""):
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.update_layout(
        title=title,
        height=300,
        margin=dict(l=50, r=20, t=50, b=40),
        xaxis=dict(visible=bool(not note)),
        yaxis=dict(visible=bool(not note)),
    )
    if note:
        fig.add_annotation(text=note, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


def _curves(hist, key, title, y_title, percent, log_y=False):
    runs = {m: d[key] for m, d in hist["metrics"].items() if key in d}
    if not runs:
        return _empty(title, "waiting for the first chunk…" if hist["done"] == 0 else "not defined for this task")
    T = next(iter(runs.values())).shape[1]
    fig = curves_figure(
        runs, title=title, y_title=y_title, percent=percent, log_y=log_y, x=_x(hist, T), x_title=hist["unit"]
    )
    fig.update_layout(
        height=300, margin=dict(l=50, r=20, t=50, b=40), legend=dict(orientation="h", y=-0.25), title_font_size=14
    )
    return fig


def error_figure(hist):
    if hist["task"] == "token reversal":
        return _curves(hist, "error", "error of each episode's rollouts", "error", True)
    return _curves(hist, "test_error", "greedy test error", "test error", True)


def grad_figure(hist):
    """‖∇L‖ (solid) beside ‖Δθ‖ of the optimizer step (dashed), first epoch of each episode, log scale: TPO's
    gradient vanishes on all-fail groups and as p reaches q, but Muon/AdamW normalise the gradient, so the
    step does not vanish with it."""
    title = (
        "first epoch: ‖∇L‖ (solid) and the step ‖Δθ‖ (dashed), log"
        if hist["task"] == "token reversal"
        else "‖∇L‖ (solid) and the Adam step ‖Δθ‖ (dashed), log"
    )
    runs, colors = {}, {}
    for m, d in hist["metrics"].items():
        for key, label in (("grad_norm", "‖∇L‖"), ("step_norm", "‖Δθ‖")):
            if key in d:
                name = f"{M.REGISTRY[m].title} {label}"
                runs[name], colors[name] = d[key], color(m)
    if not runs:
        return _empty(title, "waiting for the first chunk…")
    T = next(iter(runs.values())).shape[1]
    fig = curves_figure(
        runs, title=title, y_title="norm", percent=False, log_y=True, x=_x(hist, T), x_title=hist["unit"], colors=colors
    )
    fig.for_each_trace(lambda t: t.update(line=dict(dash="dash")) if t.name and "Δθ" in t.name else None)
    fig.update_layout(
        height=340,
        margin=dict(l=55, r=20, t=50, b=40),
        legend=dict(orientation="h", x=0.0, y=-0.3, yanchor="top", font_size=11),
        title_font_size=13,
    )
    fig.update_yaxes(dtick=1, exponentformat="power")  # one label per decade: legible on a log axis
    return fig


def zero_var_figure(hist):
    if hist["task"] != "token reversal":
        return _curves(hist, "train_error", "training error (sampled actions)", "train error", True)
    return _curves(hist, "zero_var_frac", "zero-variance groups (all fail/succeed)", "groups", True)


def pq_figure(hist, episode: int | None = None):
    """Tracked group of seed 0 at one episode: p before each epoch (p_old first) against TPO's q, one row
    per method (full width, so K × (epochs + 1) bars stay legible)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    tracked = [m for m, d in hist["metrics"].items() if "track_q" in d]
    title = "tracked group: p before each epoch → q"
    if not tracked:
        note = (
            "waiting for the first chunk…"
            if hist["done"] == 0
            else "no group to track (single-sample, token-level or bandit methods)"
        )
        return _empty(title, note)
    T = hist["metrics"][tracked[0]]["track_q"].shape[1]
    t = T - 1 if episode is None else int(min(max(episode, 0), T - 1))
    n = len(tracked)
    fig = make_subplots(
        rows=n,
        cols=1,
        shared_xaxes=False,
        vertical_spacing=0.22 if n > 1 else 0.1,
        subplot_titles=[_pq_subtitle(m, hist["metrics"][m], t, hist["epochs"][m]) for m in tracked],
    )
    fig.update_annotations(font_size=11)
    for row, m in enumerate(tracked, 1):
        d = hist["metrics"][m]
        p = d["track_p"][0, t, 0]  # [epochs, K]
        q = d["track_q"][0, t, 0]  # [K]
        s = d["track_scores"][0, t, 0]
        names = [f"y{i + 1}" + ("✓" if v > s.mean() else "") for i, v in enumerate(s)]  # ✓: above the group mean
        E = p.shape[0]
        for e in range(E):
            shade = color("p_old") if e == 0 else color("p")
            fig.add_trace(
                go.Bar(
                    x=names,
                    y=p[e],
                    name="p_old (epoch 1)" if e == 0 else f"p before epoch {e + 1}",
                    marker_color=shade,
                    opacity=0.35 + 0.65 * (e + 1) / E,
                    showlegend=row == 1,
                    legendgroup=f"p{e}",
                ),
                row,
                1,
            )
        fig.add_trace(
            go.Bar(x=names, y=q, name="q (TPO target)", marker_color=color("q"), showlegend=row == 1, legendgroup="q"),
            row,
            1,
        )
    fig.update_layout(
        title=dict(text=f"{title}, episode {t}", font=dict(size=13), x=0.0, xanchor="left"),
        barmode="group",
        height=190 + 170 * n,
        margin=dict(l=55, r=15, t=70, b=40),
        legend=dict(orientation="h", x=0.0, y=-0.08, yanchor="top", font_size=10),
    )
    fig.update_xaxes(tickfont_size=10, tickangle=0, automargin=True)
    fig.update_yaxes(tickfont_size=10, automargin=True, rangemode="tozero", title_text="prob.", title_font_size=10)
    return fig


def _pq_subtitle(m, d, t, epochs):
    p = d["track_p"][0, t, 0]
    q = d["track_q"][0, t, 0]
    kl = [max(float((q * (np.log(np.maximum(q, 1e-12)) - np.log(np.maximum(pe, 1e-12)))).sum()), 0.0) for pe in p]
    informative = bool(d["track_informative"][0, t, 0])
    tag = "" if informative else " · all-equal group: q = p_old"
    return f"{M.REGISTRY[m].title}: KL(q‖p) {kl[0]:.3f} → {kl[-1]:.3f} (epoch 1 → {epochs}){tag}"


def status_markdown(hist, backend: str = "cpu") -> str:
    done, total = hist["done"], hist["total"]
    unit = hist["unit"]
    scale = 1 if hist["task"] == "token reversal" else BANDIT_EVAL_EVERY
    head = f"**{done * scale} / {total * scale} {unit}s** · {hist['seconds']:.1f} s · backend {backend.upper()}"
    if done == 0:
        msg = "compiling this configuration (once, then cached)…" if hist["compiling"] else "starting…"
        return f"{head} · {msg}"
    parts = []
    for m, d in hist["metrics"].items():
        key = "error" if "error" in d else "test_error"
        if key in d:
            parts.append(f"{M.REGISTRY[m].title} {100 * d[key][:, -1].mean():.1f} %")
    state = "done ✔" if done >= total else "training…"
    return f"{head} · {state} · latest error: " + ", ".join(parts)


def figures(hist, backend: str = "cpu"):
    """(status, error, grad-norm, zero-variance, p-vs-q) for one history snapshot."""
    return (
        status_markdown(hist, backend),
        error_figure(hist),
        grad_figure(hist),
        zero_var_figure(hist),
        pq_figure(hist),
    )
