"""The target explorer's situations and its static figure (the demo's first tab, precomputed for the book).

One group of K completions: a **score preset** (which completions succeeded), a **p_old preset** (how
likely the behaviour policy made each of them) and η give TPO's target

    q = softmax(log p_old + u/η),   u = standardised scores,

and the first-epoch gradient p − q = p_old − q. The demo (``demos/explorer.py``) recomputes this on every
slider move; :func:`target_explorer_figure` precomputes every preset × η combination into one plotly figure
whose dropdowns and slider work in a static page (no kernel, no server). Pure numpy for the presets; the
figure's q comes from :func:`tpo_core.losses.tpo_target`.
"""

from __future__ import annotations

import math

import numpy as np

from tpo_core import checks

from . import figures

SCORE_PRESETS = ("one success", "a tie (two successes)", "half succeed", "all fail", "graded")
LOGP_PRESETS = ("uniform", "random", "success unlikely")
EXPLORER_ETAS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)


def preset_scores(preset: str, K: int) -> np.ndarray:
    """Raw scores of a named situation (candidate 1 is always among the best)."""
    K = _check_k(K)
    s = np.zeros(K)
    if preset == "one success":
        s[0] = 1.0
    elif preset == "a tie (two successes)":
        s[:2] = 1.0
    elif preset == "half succeed":
        s[: K // 2] = 1.0
    elif preset == "all fail":
        pass
    elif preset == "graded":
        s = np.linspace(1.0, 0.0, K)  # partial credit, e.g. a dense reward's fraction correct
    else:
        raise ValueError(f"scores preset must be one of {', '.join(SCORE_PRESETS)}, got {preset!r}")
    return s


def preset_logp(preset: str, K: int, seed=0) -> np.ndarray:
    """Behaviour log-probabilities of the K completions (normalised; only their softmax matters)."""
    K = _check_k(K)
    if preset == "uniform":
        return np.full(K, -math.log(K))
    if preset == "random":
        try:
            seed_i = int(seed)
        except (TypeError, ValueError):
            raise ValueError(f"seed must be a whole number, got {seed!r}") from None
        if seed_i < 0:
            raise ValueError(f"seed must be >= 0, got {seed_i}")
        x = np.random.default_rng(seed_i).normal(0.0, 1.5, K)
        return x - x.max() - np.log(np.exp(x - x.max()).sum())
    if preset == "success unlikely":  # candidate 1 (the success of most presets) holds 2 % of the mass
        p = np.full(K, 0.98 / (K - 1))
        p[0] = 0.02
        return np.log(p)
    raise ValueError(f"log-prob preset must be one of {', '.join(LOGP_PRESETS)}, got {preset!r}")


def _check_k(K) -> int:
    return checks.integer("K", K, 2)


def explorer_grid(K: int = 8, etas=EXPLORER_ETAS, seed: int = 0) -> dict:
    """Every (score preset, p_old preset, η) group of the explorer, computed with ``tpo_target``.

    Returns ``{"K", "etas", "scores": {preset: [K]}, "p_old": {preset: [K]}, "u": {preset: [K]},
    "q": {(score preset, p_old preset): [len(etas), K]}}`` (numpy float64)."""
    import jax.numpy as jnp

    from tpo_core.losses import standardize, tpo_target

    K = _check_k(K)
    etas = tuple(float(e) for e in etas)
    if not etas or any(not math.isfinite(e) or e <= 0 for e in etas):
        raise ValueError(f"etas must be a non-empty sequence of numbers > 0, got {etas!r}")
    scores = {s: preset_scores(s, K) for s in SCORE_PRESETS}
    logp = {p: preset_logp(p, K, seed) for p in LOGP_PRESETS}
    combos = [(s, p) for s in SCORE_PRESETS for p in LOGP_PRESETS]
    S = jnp.asarray(np.stack([scores[s] for s, _ in combos]), jnp.float32)  # [C, K]
    Lg = jnp.asarray(np.stack([logp[p] for _, p in combos]), jnp.float32)  # [C, K]
    q = np.stack([np.asarray(tpo_target(Lg, S, eta=e), np.float64) for e in etas], 1)  # [C, E, K]
    q /= q.sum(-1, keepdims=True)  # float32 -> float64 rounding only
    return dict(
        K=K,
        etas=etas,
        scores=scores,
        p_old={p: np.exp(v) / np.exp(v).sum() for p, v in logp.items()},
        u={s: np.asarray(standardize(jnp.asarray(v, jnp.float32)), np.float64) for s, v in scores.items()},
        q={c: q[i] for i, c in enumerate(combos)},
    )


def _summary(grid, s, p, k):
    q, p_old = grid["q"][(s, p)][k], grid["p_old"][p]
    best = grid["scores"][s] == grid["scores"][s].max()
    kl = max(float(np.sum(q * np.log(np.maximum(q, 1e-300) / p_old))), 0.0)  # ≥ 0 (no "-0.000")
    return (
        f"scores: {s} · p_old: {p} · η = {grid['etas'][k]:g}<br>mass on the best {p_old[best].sum():.2f} → "
        f"{q[best].sum():.2f} · KL(q‖p_old) = {kl:.3f} · ‖p − q‖₁ = {np.abs(p_old - q).sum():.2f}"
    )


def target_explorer_figure(
    K: int = 8, etas=EXPLORER_ETAS, seed: int = 0, default=("one success", "uniform", 1.0), grid: dict | None = None
):
    """One plotly figure with every explorer combination precomputed, controlled without a kernel.

    A dropdown over the (score preset, p_old preset) pairs and an η slider. Every control updates the same
    four traces (p_old and q in the left panel, u and the gradient p − q in the right one) with precomputed
    values; the dropdown also swaps in the η slider of its pair (reset to the default η), so the figure always
    shows the selected combination. (One dropdown, not two: a plotly dropdown cannot rewrite another one
    reliably when clicked.)"""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    grid = grid or explorer_grid(K, etas, seed)
    K, etas = grid["K"], grid["etas"]
    s0, p0, e0 = default
    if s0 not in SCORE_PRESETS or p0 not in LOGP_PRESETS:
        raise ValueError(f"default must name a score preset and a p_old preset, got {default!r}")
    if float(e0) not in etas:
        raise ValueError(f"default η must be one of etas {etas}, got {e0!r}")
    k0 = etas.index(float(e0))
    names = [f"y{i + 1}" for i in range(K)]

    def values(s, p, k):
        q = grid["q"][(s, p)][k]
        return [grid["p_old"][p], q, grid["u"][s], grid["p_old"][p] - q]

    def restyle(s, p, k):
        return {"y": [v.tolist() for v in values(s, p, k)]}, {"title.text": _summary(grid, s, p, k)}

    def eta_slider(s, p):
        steps = [dict(method="update", label=f"{e:g}", args=list(restyle(s, p, k))) for k, e in enumerate(etas)]
        return dict(active=k0, steps=steps, currentvalue=dict(prefix="η = "), pad=dict(t=75), y=0, len=1.0)

    combos = [(s, p) for s in SCORE_PRESETS for p in LOGP_PRESETS]
    buttons = [
        dict(
            method="update",
            label=f"scores: {s} · p_old: {p}",
            args=[restyle(s, p, k0)[0], {**restyle(s, p, k0)[1], "sliders": [eta_slider(s, p)]}],
        )
        for s, p in combos
    ]
    menu = dict(
        buttons=buttons,
        active=combos.index((s0, p0)),
        direction="down",
        x=0.0,
        xanchor="left",
        y=1.3,
        yanchor="top",
        showactive=True,
    )

    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.1,
        subplot_titles=("p_old and the target q", "scores u and the first-epoch gradient p − q"),
    )
    c = figures.color
    for (name, colour, col), y in zip(
        (
            ("p_old", c("p_old"), 1),
            ("q (TPO target)", c("q"), 1),
            ("u", c("u"), 2),
            ("p − q at p = p_old", c("grad"), 2),
        ),
        values(s0, p0, k0),
    ):
        fig.add_trace(
            go.Bar(
                x=names, y=y, name=name, marker_color=colour, hovertemplate="%{x}: %{y:.3f}<extra>" + name + "</extra>"
            ),
            1,
            col,
        )
    fig.update_layout(
        title=dict(text=_summary(grid, s0, p0, k0), font=dict(size=12), x=0.02, xanchor="left", y=0.98, yanchor="top"),
        barmode="group",
        height=560,
        updatemenus=[menu],
        sliders=[eta_slider(s0, p0)],
        legend=dict(orientation="h", x=0.0, y=-0.1, yanchor="top"),
        margin=dict(l=50, r=20, t=150, b=150),
    )
    fig.update_yaxes(range=[0, 1.05], title_text="probability", row=1, col=1)
    fig.update_annotations(font_size=12)
    return fig
