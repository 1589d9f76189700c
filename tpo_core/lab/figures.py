"""Plotly figures shared by the book and the demo: one colour per symbol and one per method, everywhere.

``setup()`` picks a renderer that works where the code runs:

* Jupyter Book build (``TPO_BOOK_BUILD=1``, set by ``book/build.py``): figures are emitted as
  ``text/html`` without plotly.js (the page loads plotly.js once from the book's static folder),
  because myst-nb cannot display plotly ≥ 6's JSON mimetype;
* Colab: plotly's own ``colab`` renderer;
* anywhere else: plotly's default.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from .seeds import seed_se

SYMBOL_COLORS = {  # same symbol, same colour, in equations, the book and the demo
    "p_old": "#7f7f7f",  # behaviour distribution (grey)
    "p": "#1f77b4",  # current policy over the group (blue)
    "q": "#ff7f0e",  # TPO target (orange)
    "u": "#2ca02c",  # standardised scores (green)
    "grad": "#d62728",  # p - q (red)
}
# Methods have their own palette, with no hue of a symbol above (no blue, orange, green, red or grey), so a
# figure that draws a method beside p, q or u never makes one colour mean two things. Families share a hue:
# TPO black, the GRPO variants purple, the single-sample PG family brown / pink / cyan.
METHOD_COLORS = {
    "tpo": "#000000",
    "tpo_token": "#000000",
    "tpo_no_anchor": "#80cdc1",
    "tpo_refill": "#525252",
    "grpo": "#7b3294",
    "grpo_token": "#7b3294",
    "grpo_no_kl": "#c9a0dc",
    "grpo_masked": "#a55bd0",
    "grpo_trl": "#40004b",
    "dapo": "#01665e",
    "ppo": "#17becf",
    "pg": "#8c564b",
    "dg": "#e377c2",
    "rloo": "#bcbd22",
    "rebel": "#d9b000",
    "vmpo": "#ae017e",
    "group_pg": "#c49c94",
    "ce": "#b8860b",
}
COLORS = {**SYMBOL_COLORS, **METHOD_COLORS}

_BOOK_RENDERER = "tpo_book_html"


def _register_book_renderer() -> None:
    import plotly.io as pio
    from plotly.io.base_renderers import MimetypeRenderer

    class _BookHTML(MimetypeRenderer):
        """Return text/html (plotly.js loaded by the page) instead of plotly's JSON mimetype."""

        def to_mimebundle(self, fig_dict):
            html = pio.to_html(
                fig_dict,
                include_plotlyjs=False,
                include_mathjax=False,
                full_html=False,
                config={"responsive": True, "displaylogo": False},
            )
            return {"text/html": html}

    pio.renderers[_BOOK_RENDERER] = _BookHTML()


def setup(template: str = "plotly_white") -> str:
    """Configure plotly for the book build, Colab or a plain kernel; returns the renderer name."""
    import plotly.io as pio

    pio.templates.default = template
    if os.environ.get("TPO_BOOK_BUILD") == "1":
        _register_book_renderer()
        pio.renderers.default = _BOOK_RENDERER
    elif "google.colab" in sys.modules:
        pio.renderers.default = "colab"
    return pio.renderers.default


def color(name: str) -> str:
    return COLORS.get(name, "#444444")


def mean_and_se(curves):
    """Seed mean and standard error of curves [S, T] (the band is 0 wide for a single seed)."""
    curves = np.asarray(curves, float)
    return curves.mean(0), np.nan_to_num(seed_se(curves, axis=0), nan=0.0)


def se_band(x, lo, hi, c: str, group: str, opacity: float = 0.15):
    """The ±1 SE band around a seed-mean line: one filled trace out along ``hi`` and back along ``lo`` over
    ``x``, in colour ``c``, with no hover and no legend entry of its own; ``group`` is the line's legend group,
    so a click on the line's legend entry hides both."""
    import plotly.graph_objects as go

    return go.Scatter(
        x=np.concatenate([x, x[::-1]]),
        y=np.concatenate([hi, lo[::-1]]),
        fill="toself",
        fillcolor=c,
        opacity=opacity,
        line=dict(width=0),
        hoverinfo="skip",
        showlegend=False,
        legendgroup=group,
    )


PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#3182bd",
)


def curves_figure(
    runs: dict,
    *,
    title: str = "",
    y_title: str = "error",
    x=None,
    x_title: str = "episode",
    percent: bool = True,
    log_y: bool = False,
    colors: dict | None = None,
):
    """One line per method (seed mean) with a ±1 SE band. runs: {method name: curves [S, T]}; ``colors``
    overrides the colour of a name (default: the method's colour of :data:`COLORS`)."""
    import plotly.graph_objects as go

    colors = colors or {}

    fig = go.Figure()
    scale = 100.0 if percent else 1.0
    stats = {name: mean_and_se(curves) for name, curves in runs.items()}
    floor = _log_floor([scale * m for m, _ in stats.values()]) if log_y else None
    clipped = False
    for name, (mean, se) in stats.items():
        xs = np.arange(mean.shape[0]) if x is None else np.asarray(x)
        c = colors.get(name) or color(name)
        y, lo, hi = scale * mean, scale * (mean - se), scale * (mean + se)
        if floor is not None:
            # A log axis drops zeros (TPO's all-fail gradient is exactly 0): draw them at the floor instead,
            # and keep the true value in the hover text.
            clipped |= bool(np.any(y < floor))
            y_plot, lo, hi = np.maximum(y, floor), np.maximum(lo, floor), np.maximum(hi, floor)
        else:
            y_plot = y
        fig.add_trace(se_band(xs, lo, hi, c, name))
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=y_plot,
                customdata=y,
                name=name,
                line=dict(color=c, width=2),
                legendgroup=name,
                hovertemplate="%{x}: %{customdata:.3g}<extra>" + name + "</extra>",
            )
        )
    fig.update_layout(
        title=title,
        xaxis_title=x_title,
        yaxis_title=y_title + (" (%)" if percent else ""),
        height=380,
        margin=dict(l=50, r=20, t=50, b=40),
        legend=dict(orientation="h", y=-0.2),
    )
    if log_y:
        fig.update_yaxes(type="log")
        if clipped:
            fig.add_annotation(
                text=f"values below {floor:.0e} (including exact 0) drawn at {floor:.0e}",
                xref="paper",
                yref="paper",
                x=0,
                y=1.0,
                xanchor="left",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=10, color="#666"),
            )
    return fig


def reference_figure(ours: dict, reference: dict, *, title: str = ""):
    """Ours against the reference implementation's per-seed curves (Table 3, P, H = 10): left, the seed-mean
    error with a ±1 SE band (ours solid, the reference dashed); right, every seed's final error (a strip plot).
    ``ours``, ``reference``: {method: error curves [S, T] in [0, 1]}; a method missing on one side is drawn for
    the other only (e.g. ours alone when the reference file is unavailable offline)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.68, 0.32],
        horizontal_spacing=0.09,
        subplot_titles=("seed mean ± 1 SE", "final error of each seed"),
    )
    methods = list(dict.fromkeys([*reference, *ours]))
    for j, m in enumerate(methods):
        c = color(m)
        for who, curves, dash in (("ours", ours.get(m), "solid"), ("reference", reference.get(m), "dash")):
            if curves is None or len(curves) == 0:
                continue
            mean, se = mean_and_se(curves)
            xs = np.arange(mean.shape[0])
            name = f"{m}, {who} ({len(curves)} seed{'s' * (len(curves) != 1)})"
            fig.add_trace(
                se_band(xs, 100 * (mean - se), 100 * (mean + se), c, name, 0.12 if who == "ours" else 0.07),
                row=1,
                col=1,
            )
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=100 * mean,
                    name=name,
                    legendgroup=name,
                    line=dict(color=c, width=2 if who == "ours" else 1.5, dash=dash),
                ),
                row=1,
                col=1,
            )
            finals = 100 * np.asarray(curves, float)[:, -1]
            offset = (-0.17 if who == "ours" else 0.17) + np.linspace(-0.08, 0.08, len(finals))
            fig.add_trace(
                go.Scatter(
                    x=j + offset,
                    y=finals,
                    mode="markers",
                    legendgroup=name,
                    showlegend=False,
                    marker=dict(color=c, size=7, symbol="circle" if who == "ours" else "circle-open"),
                    hovertemplate="%{y:.1f} %<extra>" + name + "</extra>",
                ),
                row=1,
                col=2,
            )
    fig.update_xaxes(title_text="episode", row=1, col=1)
    fig.update_xaxes(
        tickvals=list(range(len(methods))),
        ticktext=[f"{m}<br>● ours ○ ref" for m in methods],
        range=[-0.6, len(methods) - 0.4],
        row=1,
        col=2,
    )
    fig.update_yaxes(title_text="exact-match error (%)", range=[-3, 103], row=1, col=1)
    fig.update_yaxes(range=[-3, 103], row=1, col=2)
    fig.update_layout(
        title=title, height=430, margin=dict(l=55, r=20, t=70, b=40), legend=dict(orientation="h", y=-0.18)
    )
    return fig


def _log_floor(series) -> float:
    """Floor for a log axis: a decade below the smallest positive value, never below 1e-12 of the largest."""
    vals = np.concatenate([np.ravel(np.asarray(v, float)) for v in series]) if series else np.zeros(0)
    vals = vals[np.isfinite(vals)]
    pos = vals[vals > 0]
    if pos.size == 0:
        return 1e-12
    lo = 10.0 ** (np.floor(np.log10(pos.min())) - 1)
    return float(max(lo, pos.max() * 1e-12))
