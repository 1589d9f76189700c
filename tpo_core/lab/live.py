"""Live training for a UI: the request validation and the figures of the Gradio demo (``demos/app.py``, through
``demos/training.py``) and of the notebook widget (:mod:`tpo_core.lab.widget`), over the library's streaming engine.

:func:`validate` turns raw UI values into a :class:`tpo_core.stream.Request` (one config per method) or raises
``ValueError`` naming the input; :func:`stream` is :func:`tpo_core.stream.stream` (the methods interleaved, one
chunk each, the history after every round, so a UI can redraw between chunks and stop there) on the MNIST data
set this module loads for a bandit request. Chunks are 1 episode first (so the first points arrive within a
second on a warm process), then ``CHUNK`` episodes; a ragged remainder is run as 1-episode chunks, so a
configuration compiles exactly two chunk shapes (:func:`tpo_core.stream.schedule`). The figure builders
(``error_figure``, ``grad_figure``, ``zero_var_figure``, ``pq_figure``) turn one history
snapshot into plotly figures. Nothing here imports gradio or ``demos``: the package alone (as Colab installs it)
runs it.
"""

from __future__ import annotations

import inspect
import threading
from typing import Iterator

import numpy as np

from tpo_core import checks
from tpo_core import methods as M
from tpo_core import stream as S
from tpo_core.config import BanditConfig, TokenConfig
from tpo_core.constants import DENSE_REWARDS, MAX_ETA, TASK_FAMILIES
from tpo_core.constants import REWARDS as _REWARDS
from tpo_core.stream import BANDIT_EVAL_EVERY, CHUNK, KEEP, Request, family, is_warm, run_chunk, schedule  # noqa: F401

from .figures import color, curves_figure

TASKS = TASK_FAMILIES
REWARDS = tuple(reversed(_REWARDS))  # the UI's order: the sparse (default) reward first, then the dense ones
MAX_TRAIN_K = 16
MAX_EPISODES = 2000
MAX_BANDIT_STEPS = 10_000
MAX_B = 256
MAX_SEEDS = 4
MAX_METHODS = 4
H_MIN, H_MAX = 2, 10


def validate(
    task, methods, reward="terminal", H=6, B=100, K=8, eta=1.0, episodes=300, n_seeds=1, seed=0, bandit_steps=3000
) -> Request:
    """Turn raw UI values into a :class:`tpo_core.stream.Request`, or raise ``ValueError`` naming the input (the configs' checks,
    :mod:`tpo_core.checks`, with the UI's bounds; the demo wraps it for its message)."""
    checks.require(task in TASKS, "task", f"must be one of {', '.join(TASKS)}", task)
    if isinstance(methods, str):
        methods = [methods]
    checks.require(
        methods is None or (isinstance(methods, (list, tuple)) and all(isinstance(m, str) for m in methods)),
        "methods",
        "must be a list of method names",
        methods,
    )
    methods = list(dict.fromkeys(methods or []))
    if not methods:
        raise ValueError("methods: pick at least one method")
    if len(methods) > MAX_METHODS:
        raise ValueError(
            f"methods: pick at most {MAX_METHODS} at once (each one trains its own model), got {len(methods)}"
        )
    eta = checks.eta(checks.as_float(eta), MAX_ETA)
    n_seeds = checks.whole_number("seeds", n_seeds, 1, MAX_SEEDS)
    seed = checks.whole_number("seed", seed, 0, 2**31 - 1)
    seeds = tuple(range(seed, seed + n_seeds))
    configs = []
    if family(task).is_token:
        checks.require(reward in REWARDS, "reward", f"must be one of {', '.join(REWARDS)}", reward)
        H = checks.whole_number("H", H, H_MIN, H_MAX)
        K = checks.whole_number("K", K, 2, MAX_TRAIN_K)
        B = checks.whole_number("B", B, 1, MAX_B)
        episodes = checks.whole_number("episodes", episodes, 1, MAX_EPISODES)
        for m in methods:
            if m not in M.TOKEN_METHODS:
                raise ValueError(
                    f"methods: {m!r} does not run on the token task; choose from {', '.join(M.TOKEN_METHODS)}"
                )
            if M.REGISTRY[m].dense_only and reward not in DENSE_REWARDS:
                raise ValueError(
                    f"methods: {m} needs a dense reward ({' or '.join(DENSE_REWARDS)}), but reward = {reward}"
                )
            cfg = TokenConfig(method=m, reward=reward, H=H, B=B, K=K, eta=eta, episodes=episodes)
            configs.append((m, cfg.interaction_matched()))
        return Request(task, tuple(configs), seeds, episodes)
    steps = checks.whole_number("MNIST steps", bandit_steps, BANDIT_EVAL_EVERY, MAX_BANDIT_STEPS)
    checks.require(steps % BANDIT_EVAL_EVERY == 0, "MNIST steps", f"must be a multiple of {BANDIT_EVAL_EVERY}", steps)
    for m in methods:
        if m not in M.BANDIT_METHODS:
            raise ValueError(
                f"methods: {m!r} does not run on the MNIST bandit; choose from {', '.join(M.BANDIT_METHODS)}"
            )
        configs.append((m, BanditConfig(method=m, steps=steps, eta=eta, eval_every=BANDIT_EVAL_EVERY)))
    return Request(task, tuple(configs), seeds, steps // BANDIT_EVAL_EVERY)


# --------------------------------------------------------------------------------------------
# the engine (tpo_core.stream), with the MNIST data set this lab loads for a bandit request
# --------------------------------------------------------------------------------------------
_dataset = None
_dataset_lock = threading.Lock()


def control_defaults() -> dict:
    """The controls of a live run after ``task`` and ``methods`` (:func:`validate`'s keywords, in its order) with
    its defaults, which are the demo's default run; the notebook widget overrides a few for a smaller one."""
    return {k: p.default for k, p in inspect.signature(validate).parameters.items() if p.default is not p.empty}


def mnist_dataset():
    global _dataset
    with _dataset_lock:
        if _dataset is None:
            from . import mnist

            _dataset = mnist.load()
        return _dataset


def _dataset_for(configs):
    return mnist_dataset() if any(isinstance(cfg, BanditConfig) for cfg in configs) else None


def program_for(cfg):
    """:func:`tpo_core.stream.program_for`, on the MNIST data set for a bandit config."""
    return S.program_for(cfg, _dataset_for([cfg]))


def warm(req: Request) -> float:
    """:func:`tpo_core.stream.warm` of ``req`` (startup, background thread); seconds spent."""
    return S.warm(req, _dataset_for(cfg for _, cfg in req.configs))


def stream(req: Request, chunk: int | None = None) -> Iterator[dict]:
    """:func:`tpo_core.stream.stream` of ``req``: every method interleaved, the history after each round."""
    return S.stream(req, chunk, _dataset_for(cfg for _, cfg in req.configs))


# --------------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------------
def _x(hist, T):
    f = family(hist)
    return np.arange(T) if f.is_token else (np.arange(T) + 1) * f.block


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
    if family(hist).is_token:
        return _curves(hist, "error", "error of each episode's rollouts", "error", True)
    return _curves(hist, "test_error", "greedy test error", "test error", True)


def grad_figure(hist):
    """‖∇L‖ (solid) beside ‖Δθ‖ of the optimizer step (dashed), first epoch of each episode, log scale: TPO's
    gradient vanishes on all-fail groups and as p reaches q, but Muon/AdamW normalise the gradient, so the
    step does not vanish with it."""
    title = (
        "first epoch: ‖∇L‖ (solid) and the step ‖Δθ‖ (dashed), log"
        if family(hist).is_token
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
    if not family(hist).is_token:
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
    scale = family(hist).block
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
