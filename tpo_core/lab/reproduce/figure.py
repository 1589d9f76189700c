"""The figures of a reproduction: a preset's curves as one self-contained HTML page (what the runner writes
beside each preset's summary) and Table 3's seed-by-seed figure. They read reproduction objects (``Run``,
:mod:`~tpo_core.lab.reproduce.seedwise`), so they live here and :mod:`tpo_core.lab.figures` stays a leaf."""

from __future__ import annotations

import numpy as np

from ..figures import PALETTE, color, curves_figure
from .seedwise import FINAL_EPISODES, per_seed


def preset_figure_html(summary: dict, runs, curves: dict) -> str:
    """A reproduction preset's curves (seed mean ± 1 SE of each run's primary curve) as one self-contained
    HTML page. ``runs`` have ``key``, ``method``, ``kind``, ``primary`` and ``cfg``; ``curves[run.key]`` maps
    metric names to [S, T]."""
    import plotly.io as pio

    runs = list(runs)
    unique = len({r.method for r in runs}) == len(runs)
    colors = {r.key: color(r.method) if unique else PALETTE[i % len(PALETTE)] for i, r in enumerate(runs)}
    bandit = bool(runs) and not runs[0].family.is_token
    x = (np.arange(1, runs[0].length + 1) * runs[0].cfg.eval_every) if bandit else None
    fig = curves_figure(
        {r.key: curves[r.key][r.primary] for r in runs},
        colors=colors,
        x=x,
        title=f"{summary['title']} — budget {summary['budget']} (seed mean ± 1 SE)",
        x_title="step" if bandit else "episode",
        y_title="greedy test error" if bandit else "error of the episode's rollouts",
    )
    fig.update_layout(template="plotly_white", height=480)
    return pio.to_html(fig, include_plotlyjs=True, full_html=True)


def seedwise_figure(ours: dict, reference: dict, *, methods=("tpo", "grpo"), block: int = 10, title: str = ""):
    """Every seed of ours and of the reference (Table 3, P, H = 10), seed by seed. Top, each seed's final error
    (mean of the last 10 episodes) as one dot, ours (●) beside the reference's (○), with each group's median as
    a bar; below, one row per method, ours left and the reference's right: each seed's error curve as a thin line
    (the mean of each ``block`` episodes, to keep the page light) behind the median over seeds (thick).
    ``ours``, ``reference``: {method: error curves [S, T] in [0, 1]}; a side that is missing is left empty."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    methods = [m for m in methods if m in ours or m in reference]
    sides = (("ours", ours, "solid", "circle"), ("reference", reference, "dash", "circle-open"))
    n = max(1, len(methods))
    specs = [[{"colspan": 2}, None]] + [[{}, {}] for _ in range(n)]
    titles = [f"final error of each seed (mean of its last {FINAL_EPISODES} episodes)"]
    titles += [f"{m}, {who}: each seed (thin) and the median" for m in methods for who, *_ in sides]
    fig = make_subplots(
        rows=n + 1,
        cols=2,
        specs=specs,
        row_heights=[1.2] + [1.0] * n,
        horizontal_spacing=0.08,
        vertical_spacing=0.09,
        subplot_titles=titles,
    )
    ticks = []
    for r, m in enumerate(methods):
        c = color(m)
        for k, (who, curves, dash, symbol) in enumerate(sides):
            x_dot = 2 * r + k
            ticks.append((x_dot, f"{m}, {who}"))
            if m not in curves or len(curves[m]) == 0:
                continue
            cv = np.asarray(curves[m], float)
            finals = per_seed(cv)["final"]
            fig.add_trace(
                go.Scatter(
                    x=x_dot + _spread(finals),
                    y=finals,
                    mode="markers",
                    showlegend=False,
                    marker=dict(color=c, size=8, symbol=symbol, line=dict(width=1.5, color=c)),
                    customdata=np.arange(len(finals)),
                    hovertemplate="seed %{customdata}: %{y:.2f} %<extra>" + f"{m}, {who}</extra>",
                ),
                row=1,
                col=1,
            )
            fig.add_trace(
                go.Scatter(
                    x=[x_dot - 0.3, x_dot + 0.3],
                    y=[np.median(finals)] * 2,
                    mode="lines",
                    showlegend=False,
                    line=dict(color="#333333", width=2),
                    hovertemplate=f"median {np.median(finals):.2f} %<extra>{m}, {who}</extra>",
                ),
                row=1,
                col=1,
            )
            T = cv.shape[1] - cv.shape[1] % block
            blocks = cv[:, :T].reshape(len(cv), -1, block).mean(2)
            xs = np.arange(blocks.shape[1]) * block + (block - 1) / 2
            for s, line in enumerate(blocks):
                fig.add_trace(
                    go.Scatter(
                        x=xs,
                        y=100 * line,
                        mode="lines",
                        showlegend=False,
                        opacity=0.35,
                        line=dict(color=c, width=0.8),
                        hovertemplate=f"seed {s}: " + "%{y:.1f} %<extra>" + f"{m}, {who}</extra>",
                    ),
                    row=r + 2,
                    col=k + 1,
                )
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=100 * np.median(blocks, 0),
                    mode="lines",
                    name=f"{m}, {who}: median of {len(cv)} seeds",
                    line=dict(color=c, width=3, dash=dash),
                ),
                row=r + 2,
                col=k + 1,
            )
        for k in (1, 2):
            fig.update_yaxes(range=[-3, 103], row=r + 2, col=k, title_text="error (%)" if k == 1 else None)
            fig.update_xaxes(title_text=f"episode (mean of {block})" if r == n - 1 else None, row=r + 2, col=k)
    fig.update_xaxes(
        tickvals=[t for t, _ in ticks], ticktext=[s for _, s in ticks], range=[-0.6, len(ticks) - 0.4], row=1, col=1
    )
    fig.update_yaxes(range=[-3, 103], title_text="final error (%)", row=1, col=1)
    fig.update_layout(
        title=title, height=260 * n + 330, margin=dict(l=55, r=20, t=80, b=40), legend=dict(orientation="h", y=-0.08)
    )
    return fig


def _spread(values, bin_width: float = 3.0, half_width: float = 0.3, step: float = 0.07) -> np.ndarray:
    """Horizontal offsets for a strip plot: dots within ``bin_width`` of each other sit side by side, centred."""
    values = np.asarray(values, float)
    offsets = np.zeros(len(values))
    bins = np.floor(values / bin_width)
    for b in np.unique(bins):
        idx = np.nonzero(bins == b)[0]
        k = len(idx)
        if k > 1:
            gap = min(step, 2 * half_width / (k - 1))
            offsets[idx[np.argsort(values[idx], kind="stable")]] = (np.arange(k) - (k - 1) / 2) * gap
    return offsets
