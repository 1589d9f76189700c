"""The target explorer: TPO's target q for one group, its KL objective, and GRPO's advantages beside it.

Pure numpy (a group of at most 64 numbers: no JAX dispatch or compile on the request path), checked
against :func:`tpo_core.losses.tpo_target` / :func:`tpo_core.losses.grpo_advantages` in the tests.

    u = (s - mean s) / σ        (σ = population std; u = s - mean s when σ <= 1e-6)
    q = softmax(log p_old + u/η) = argmax_r  Σ r_i u_i - η KL(r ‖ p_old)
    ∂L/∂ℓ_i = p_i - q_i         (the gradient TPO's cross-entropy puts on each group log-prob)
    A_i = (s_i - mean s) / (σ + 1e-8)   (GRPO)
"""

from __future__ import annotations

import math
import re

import numpy as np

from tpo_core.constants import GRPO_EPS, STD_FLOOR  # the engine's own values (a module with no imports)
from tpo_core.lab import explorer as core
from tpo_core.lab import figures

from .inputs import InputError, check_eta, check_int

MAX_K = 64  # largest group the explorer accepts
N_ALTERNATIVES = 400  # perturbed distributions q is compared against

SCORE_PRESETS = core.SCORE_PRESETS + ("custom",)  # one copy of the presets, shared with the book
LOGP_PRESETS = core.LOGP_PRESETS + ("custom",)


# --------------------------------------------------------------------------------------------
# validation (demos/inputs.py: the library's checks as InputError) and parsing
# --------------------------------------------------------------------------------------------
def check_k(K, max_k: int = MAX_K) -> int:
    return check_int("K", K, 2, max_k)


def parse_numbers(text, name: str, K: int) -> np.ndarray:
    """'1, 0, 0.5' (commas and/or spaces) -> float array of length K; clear errors otherwise."""
    if text is None or not str(text).strip():
        raise InputError(f"{name}: enter {K} numbers separated by commas")
    parts = [p for p in re.split(r"[,\s;]+", str(text).strip()) if p]
    values = []
    for i, p in enumerate(parts, 1):
        try:
            v = float(p)
        except ValueError:
            raise InputError(f"{name}: entry {i} ({p!r}) is not a number") from None
        if not math.isfinite(v):
            raise InputError(f"{name}: entry {i} ({p!r}) is not a finite number")
        values.append(v)
    if len(values) != K:
        raise InputError(f"{name}: got {len(values)} numbers but K = {K}; enter exactly {K}")
    return np.asarray(values, np.float64)


def format_numbers(x) -> str:
    return ", ".join(f"{v:g}" for v in np.round(np.asarray(x, float), 3))


def preset_scores(preset: str, K: int) -> np.ndarray:
    """Raw scores of a named situation (candidate 1 is the best one): :func:`tpo_core.lab.explorer.preset_scores`,
    the same presets as the book's static explorer (ch. 2)."""
    try:
        return core.preset_scores(preset, K)
    except ValueError as e:
        raise InputError(str(e)) from None


def preset_logp(preset: str, K: int, seed=0) -> np.ndarray:
    """Behaviour log-probabilities of the K completions: :func:`tpo_core.lab.explorer.preset_logp`."""
    try:
        return core.preset_logp(preset, K, seed)
    except ValueError as e:
        raise InputError(str(e)) from None


# --------------------------------------------------------------------------------------------
# the math
# --------------------------------------------------------------------------------------------
def log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def softmax(x):
    return np.exp(log_softmax(x))


def standardize(scores, floor: float = STD_FLOOR):
    c = scores - scores.mean(-1, keepdims=True)
    sigma = np.sqrt((c**2).mean(-1, keepdims=True))
    return np.where(sigma > floor, c / np.where(sigma > floor, sigma, 1.0), c)


def tpo_target(logp_old, scores, eta):
    return softmax(log_softmax(logp_old) + standardize(scores) / eta)


def grpo_advantages(scores):
    c = scores - scores.mean(-1, keepdims=True)
    return c / (np.sqrt((c**2).mean(-1, keepdims=True)) + GRPO_EPS)


def kl_objective(r, u, p_old, eta):
    """J(r) = Σ r_i u_i − η KL(r ‖ p_old), for one or many distributions r [..., K]."""
    r = np.asarray(r, np.float64)
    kl = np.where(r > 0, r * (np.log(np.maximum(r, 1e-300)) - np.log(p_old)), 0.0).sum(-1)
    return (r * u).sum(-1) - eta * kl


def alternatives(q, rng, n: int = N_ALTERNATIVES):
    """Distributions near and far from q: log q plus Gaussian noise at scales 0.01 … 3."""
    scales = np.geomspace(0.01, 3.0, n)[:, None]
    return softmax(np.log(q)[None, :] + scales * rng.standard_normal((n, q.shape[0])))


def analyse(K, eta, scores, logp_old, seed: int = 0) -> dict:
    """Everything the explorer shows for one group, as numpy arrays and floats."""
    K = check_k(K)
    eta = check_eta(eta)
    scores = np.asarray(scores, np.float64)
    logp_old = np.asarray(logp_old, np.float64)
    if scores.shape != (K,) or logp_old.shape != (K,):
        raise InputError(f"scores and log-probs need {K} entries each, got {scores.size} and {logp_old.size}")
    p_old = softmax(logp_old)
    u = standardize(scores)
    q = tpo_target(logp_old, scores, eta)
    adv = grpo_advantages(scores)
    alt = alternatives(q, np.random.default_rng(seed))
    j_alt = kl_objective(alt, u, p_old, eta)
    best = np.flatnonzero(scores == scores.max())
    onehot = np.zeros(K)
    onehot[best[0]] = 1.0
    return dict(
        K=K,
        eta=eta,
        scores=scores,
        p_old=p_old,
        u=u,
        q=q,
        grad=p_old - q,
        adv=adv,
        zero_variance=bool(np.sqrt(((scores - scores.mean()) ** 2).mean()) <= STD_FLOOR),
        J_q=float(kl_objective(q, u, p_old, eta)),
        J_closed=float(eta * np.log((p_old * np.exp(u / eta)).sum())),
        J_p_old=float(kl_objective(p_old, u, p_old, eta)),
        J_onehot=float(kl_objective(onehot, u, p_old, eta)),
        J_no_anchor=float(kl_objective(softmax(u / eta), u, p_old, eta)),
        J_alt_best=float(j_alt.max()),
        n_alt=int(alt.shape[0]),
        mass_best_old=float(p_old[best].sum()),
        mass_best_q=float(q[best].sum()),
        grad_l1=float(np.abs(p_old - q).sum()),
        adv_l1=float(np.abs(adv).sum()),
    )


# --------------------------------------------------------------------------------------------
# what the UI shows
# --------------------------------------------------------------------------------------------
def panels_figure(panels, *, title: str = "", height: int = 330, barmode: str = "group"):
    """Side-by-side bar panels built straight from dicts: no plotly validation and no ``make_subplots`` grid,
    whose per-property checks cost more than the bars themselves on a slider that redraws on every move.

    panels: [(subtitle, [(name, x, y, colour), ...]), ...]."""
    import plotly.graph_objects as go

    n, gap = len(panels), 0.08
    width = (1.0 - gap * (n - 1)) / n
    data, layout = (
        [],
        dict(
            barmode=barmode,
            height=height,
            annotations=[],
            title=dict(text=title, font=dict(size=14)) if title else None,
            legend=dict(orientation="h", y=-0.15),
            margin=dict(l=40, r=10, t=70 if title else 40, b=30),
        ),
    )
    for i, (subtitle, bars) in enumerate(panels):
        ax = "" if i == 0 else str(i + 1)
        lo = i * (width + gap)
        layout[f"xaxis{ax}"] = dict(domain=[lo, lo + width], anchor=f"y{ax}")
        layout[f"yaxis{ax}"] = dict(anchor=f"x{ax}", zeroline=True)
        layout["annotations"].append(
            dict(
                text=subtitle,
                x=lo + width / 2,
                y=1.0,
                xref="paper",
                yref="paper",
                showarrow=False,
                xanchor="center",
                yanchor="bottom",
                font=dict(size=12),
            )
        )
        for name, x, y, colour in bars:
            data.append(
                dict(
                    type="bar",
                    x=list(x),
                    y=np.asarray(y, float).tolist(),
                    name=name,
                    marker=dict(color=colour),
                    xaxis=f"x{ax}",
                    yaxis=f"y{ax}",
                )
            )
    return go.Figure(data=data, layout={k: v for k, v in layout.items() if v is not None}, _validate=False)


def _names(K):
    return [f"y{i + 1}" for i in range(K)]


def bars_figure(a: dict):
    """p_old and q over the group; u and the first-epoch gradient p − q (colours of ``figures.COLORS``)."""
    c, x = figures.color, _names(a["K"])
    return panels_figure(
        [
            ("distributions over the group", [("p_old", x, a["p_old"], c("p_old")), ("q", x, a["q"], c("q"))]),
            (
                "standardised scores u and the gradient p − q (at p = p_old)",
                [("u", x, a["u"], c("u")), ("p − q", x, a["grad"], c("grad"))],
            ),
        ],
        title=f"One group, K = {a['K']}, η = {a['eta']:g}: p_old → q",
    )


def contrast_figure(a: dict):
    """What each method pushes on every log-prob at the first epoch: TPO q − p_old, GRPO A_i."""
    c, x = figures.color, _names(a["K"])
    fig = panels_figure(
        [
            ("TPO: q − p_old (bounded, 0 at p = q)", [("TPO  q − p_old", x, a["q"] - a["p_old"], c("tpo"))]),
            ("GRPO: advantage A_i (no p_old, no η)", [("GRPO  A", x, a["adv"], c("grpo"))]),
        ],
        height=300,
    )
    fig.update_layout(showlegend=False)
    return fig


def _f(x: float) -> str:
    return f"{round(x, 4) + 0.0:.4f}"  # no "-0.0000"


def summary_markdown(a: dict) -> str:
    lines = []
    if a["zero_variance"]:
        lines.append(
            "**Zero-variance group** (all scores equal): u = 0, so **q = p_old** and TPO's first-epoch "
            "gradient is exactly zero; GRPO's advantages are zero too (no signal for either)."
        )
    ok = a["J_q"] >= a["J_alt_best"] - 1e-9
    lines += [
        f"**KL-regularised objective** J(r) = Σ rᵢuᵢ − η·KL(r‖p_old), η = {a['eta']:g}:",
        "",
        "| distribution r | J(r) |",
        "|---|---|",
        f"| **q (TPO's target)** | **{_f(a['J_q'])}** |",
        f"| closed form η·log Σ p_old·e^(u/η) | {_f(a['J_closed'])} |",
        f"| best of {a['n_alt']} perturbations of q | {_f(a['J_alt_best'])} (q ahead by {a['J_q'] - a['J_alt_best']:.1e}) |",
        f"| p_old (stay put) | {_f(a['J_p_old'])} |",
        f"| one-hot on the best candidate | {_f(a['J_onehot'])} |",
        f"| softmax(u/η) (no anchor) | {_f(a['J_no_anchor'])} |",
        "",
        ("q beats every perturbed alternative ✔" if ok else "⚠ a perturbation beat q (numerical issue)"),
        "",
        f"Mass on the best-scored candidates: p_old **{a['mass_best_old']:.3f}** → q **{a['mass_best_q']:.3f}**. "
        f"TPO's first-epoch push ‖p − q‖₁ = **{a['grad_l1']:.3f}** (≤ 2 always); "
        f"GRPO's Σ|Aᵢ| = **{a['adv_l1']:.3f}** (independent of p_old and η).",
    ]
    return "\n".join(lines)
