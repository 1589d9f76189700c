"""Live training in a notebook (Jupyter, JupyterLab, Colab): the Gradio demo's training tab as an ipywidget::

    from tpo_core.lab.widget import live_training
    live_training(methods=["tpo", "grpo"], H=4, episodes=200)      # the last expression of a cell

Controls for the task, the methods, the reward, H, B, K, η, the episodes and the seeds, **Train** and **Stop**
buttons, and three plotly ``FigureWidget``\\ s redrawn in place after every chunk: the error curve, the first
epoch's ‖∇L‖ beside the optimizer's step ‖Δθ‖, and one tracked group's p before each epoch against TPO's target q
(with a slider to scrub through the episodes). Training runs on the demo's engine, :mod:`tpo_core.lab.live`
(:func:`~tpo_core.lab.live.validate` turns the controls into a request, :func:`~tpo_core.lab.live.stream` trains it chunk
by chunk) in a background thread, so the kernel stays responsive and **Stop** ends the run between two chunks (a
chunk is one compiled call and cannot be cut short). A bad control value shows :func:`~tpo_core.lab.live.validate`'s
message in the widget.

Where no kernel will be there to train (the Jupyter Book build, ``TPO_BOOK_BUILD=1``), displaying the widget
instead runs one short training through the same engine and shows the same figures as static plotly HTML, with a
line saying that the cell is live in Jupyter and Colab. In Colab the custom-widget manager is switched on first
(plotly's ``FigureWidget`` is an anywidget, a third-party widget).
"""

from __future__ import annotations

import html
import os
import re
import sys
import threading

from tpo_core import methods as M
from tpo_core.constants import TOKEN_REVERSAL
from tpo_core.stream import family

from . import figures, live

DEFAULTS = dict(
    task=TOKEN_REVERSAL,
    methods=("tpo", "grpo"),
    **dict(live.control_defaults(), H=4, B=32, episodes=200, bandit_steps=1000),
)
FIGURES = ("error", "grad", "pq")
UIREVISION = "tpo-live"  # plotly keeps the reader's zoom and legend clicks across the per-chunk redraws
TEMPLATE = "plotly_white"  # the book's and the demo's (tpo_core.lab.figures.setup), without changing plotly's default


def book_build() -> bool:
    """True while the Jupyter Book builds its static pages (``book/build.py`` sets ``TPO_BOOK_BUILD=1``)."""
    return os.environ.get("TPO_BOOK_BUILD") == "1"


def enable_colab_widgets() -> bool:
    """In Colab, turn on the widget manager that loads third-party widgets (plotly's FigureWidget); True if
    it was called. Anywhere else (or with a ``google.colab`` that lacks it) nothing happens."""
    if "google.colab" not in sys.modules:
        return False
    try:
        from google.colab import output
    except ImportError:
        return False
    enable = getattr(output, "enable_custom_widget_manager", None)
    if enable is None:
        return False
    enable()
    return True


def _method_options(task: str) -> list:
    return [(f"{M.REGISTRY[n].title} ({n})", n) for n in family(task).methods]


def _html(markdown: str) -> str:
    """The engine's status line (markdown with **bold**) as HTML."""
    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(markdown, quote=False))


def sync_figure(target, fig) -> None:
    """Redraw FigureWidget ``target`` as ``fig`` in place: the same traces are updated (their points grow),
    a changed set of traces is replaced; the layout is ``fig``'s (annotations included: none if it has none).
    Call it once ``target`` is displayed: plotly's widget drops what it is sent before it has a view, so a
    FigureWidget starts from its constructor's figure."""
    same = len(target.data) == len(fig.data) and all(
        a.type == b.type and a.name == b.name for a, b in zip(target.data, fig.data)
    )
    layout = fig.layout.to_plotly_json()
    layout["uirevision"] = UIREVISION
    layout.setdefault("annotations", [])
    layout.setdefault("template", TEMPLATE)
    gone = _leaves(target.layout.to_plotly_json()) - _leaves(layout)
    with target.batch_update():
        if same:
            for old, new in zip(target.data, fig.data):
                old.update(new.to_plotly_json(), overwrite=True)
        else:
            target.data = ()
            target.add_traces(list(fig.data))
        target.layout = layout
    # Assigning a layout sends the frontend only what it sets, so what the previous layout had (a note, a hidden
    # axis) would stay on screen: send the annotations, and unset the rest. The Python side has already dropped
    # those values, so plotly_relayout would find nothing changed and send nothing: send the message itself.
    target.plotly_relayout({"annotations": layout["annotations"]})
    if gone:
        target._send_relayout_msg({path: None for path in sorted(gone)})


def _leaves(layout: dict, prefix: str = "") -> set:
    """The dotted paths of a layout's values (its template left out), e.g. {"xaxis.visible", "title.text"}."""
    out = set()
    for key, value in layout.items():
        if key == "template":
            continue
        if isinstance(value, dict):
            out |= _leaves(value, f"{prefix}{key}.")
        else:
            out.add(f"{prefix}{key}")
    return out


def placeholder(title: str, note: str):
    """The figure a FigureWidget is built from: a title and a note, axes shown (a later redraw merges into
    the frontend's layout, so nothing is hidden here that a later figure would have to show again)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.update_layout(
        title=title, height=300, margin=dict(l=50, r=20, t=50, b=40), template=TEMPLATE, uirevision=UIREVISION
    )
    fig.add_annotation(text=note, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


class LiveTraining:
    """The live training widget. Keyword arguments set the controls' starting values (those of
    :func:`tpo_core.lab.live.validate`: ``task``, ``methods``, ``reward``, ``H``, ``B``, ``K``, ``eta``, ``episodes``,
    ``n_seeds``, ``seed``, ``bandit_steps``); ``snapshot`` overrides some of them for the static snapshot shown in
    the book build (e.g. fewer episodes). Display it (last expression of a cell) or use its ``widget``.

    :meth:`train` / :meth:`stop` are what the buttons call; ``history`` is the last history the engine
    yielded; ``on_update(hist)``, if set, is called (in the training thread) after each redraw."""

    def __init__(self, snapshot: dict | None = None, **values):
        unknown = sorted(set(values) - set(DEFAULTS))
        if unknown:
            raise ValueError(
                f"LiveTraining: unknown control(s) {', '.join(unknown)}; the controls are {', '.join(DEFAULTS)}"
            )
        unknown = sorted(set(snapshot or {}) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"snapshot: unknown control(s) {', '.join(unknown)}")
        self.defaults = {**DEFAULTS, **values}
        self.snapshot_values = dict(snapshot or {})
        self.history = None
        self.on_update = None
        self.updates = 0  # redraws since the last Train
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._widget = None
        self._showing_episode = None  # set while the code (not the reader) moves the episode slider

    # ---------------------------------------------------------------------------------------- the widget
    @property
    def widget(self):
        """The ipywidgets box (built on first use)."""
        if self._widget is None:
            self._build()
        return self._widget

    @property
    def controls(self) -> dict:
        """The input widgets by name (the keyword arguments of :func:`tpo_core.lab.live.validate`)."""
        self.widget  # noqa: B018 (builds them)
        return self._controls

    def _build(self):
        import ipywidgets as W
        import plotly.graph_objects as go

        d = self.defaults
        style = {"description_width": "initial"}

        def small(width="150px"):
            return W.Layout(width=width)

        task = d["task"] if d["task"] in live.TASKS else live.TASKS[0]
        options = _method_options(task)
        chosen = d["methods"] if not isinstance(d["methods"], str) else [d["methods"]]
        chosen = tuple(m for m in chosen if m in dict((v, v) for _, v in options))
        c = self._controls = dict(
            task=W.Dropdown(
                options=list(live.TASKS), value=task, description="task", style=style, layout=small("240px")
            ),
            methods=W.SelectMultiple(
                options=options, value=chosen, rows=5, description="methods", style=style, layout=small("300px")
            ),
            reward=W.Dropdown(
                options=list(live.REWARDS), value=d["reward"], description="reward", style=style, layout=small("200px")
            ),
            H=W.IntText(value=d["H"], description="H", style=style, layout=small("110px")),
            B=W.IntText(value=d["B"], description="B", style=style, layout=small("110px")),
            K=W.IntText(value=d["K"], description="K", style=style, layout=small("110px")),
            eta=W.FloatText(value=d["eta"], description="η", style=style, layout=small("120px")),
            episodes=W.IntText(value=d["episodes"], description="episodes", style=style, layout=small("160px")),
            bandit_steps=W.IntText(
                value=d["bandit_steps"], description="MNIST steps", style=style, layout=small("180px")
            ),
            n_seeds=W.IntText(value=d["n_seeds"], description="seeds", style=style, layout=small("120px")),
            seed=W.IntText(value=d["seed"], description="first seed", style=style, layout=small("150px")),
        )
        self.train_button = W.Button(description="Train", button_style="primary", icon="play")
        self.stop_button = W.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self.train_button.on_click(lambda _: self.train())
        self.stop_button.on_click(lambda _: self.stop())
        self.status = W.HTML("Press <b>Train</b>.")
        self.message = W.HTML("")
        self.episode = W.IntSlider(
            value=0,
            min=0,
            max=0,
            description="tracked group at episode",
            style=style,
            layout=small("420px"),
            disabled=True,
            continuous_update=False,
        )
        self.episode.observe(self._on_episode, names="value")
        c["task"].observe(self._on_task, names="value")
        titles = {"error": "error", "grad": "‖∇L‖ and the step ‖Δθ‖", "pq": "tracked group: p before each epoch → q"}
        self.figures = {name: go.FigureWidget(placeholder(titles[name], "press Train")) for name in FIGURES}
        for name in ("error", "grad"):
            self.figures[name].layout.width = 480
        token_row = W.HBox([c["reward"], c["H"], c["K"], c["B"], c["episodes"]])
        self._token_only = [c["reward"], c["H"], c["K"], c["B"], c["episodes"]]
        self._bandit_only = [c["bandit_steps"]]
        controls = W.VBox(
            [
                W.HBox([c["task"], c["methods"]]),
                token_row,
                W.HBox([c["eta"], c["bandit_steps"], c["n_seeds"], c["seed"]]),
                W.HBox([self.train_button, self.stop_button]),
                self.message,
                self.status,
            ]
        )
        plots = W.VBox(
            [
                W.HBox([self.figures["error"], self.figures["grad"]], layout=W.Layout(flex_flow="row wrap")),
                self.episode,
                self.figures["pq"],
            ]
        )
        self._widget = W.VBox([controls, plots])
        self._on_task({"new": task})

    @staticmethod
    def _figure(name, hist, episode=None):
        fig = (
            {"error": live.error_figure, "grad": live.grad_figure}[name](hist)
            if name != "pq"
            else live.pq_figure(hist, episode)
        )
        fig.update_layout(template=TEMPLATE)
        if name != "pq":
            fig.update_layout(width=480)
        return fig

    def _on_task(self, change):
        token = family(change["new"]).is_token
        c = self._controls
        options = _method_options(change["new"])
        keep = tuple(m for m in c["methods"].value if m in {v for _, v in options})
        c["methods"].options = options
        c["methods"].value = keep
        for w in self._token_only:
            w.layout.display = None if token else "none"
        for w in self._bandit_only:
            w.layout.display = "none" if token else None
        self.episode.layout.display = None if token else "none"

    def _on_episode(self, change):
        if self._showing_episode is not None or self.history is None or self.running:
            return
        sync_figure(self.figures["pq"], self._figure("pq", self.history, int(change["new"])))

    def _ipython_display_(self):
        from IPython.display import display

        if book_build():
            self._show_snapshot()
            return
        enable_colab_widgets()
        display(self.widget)

    # ---------------------------------------------------------------------------------------- actions
    def values(self) -> dict:
        """The controls' current values, as :func:`tpo_core.lab.live.validate` takes them."""
        return {k: (list(w.value) if k == "methods" else w.value) for k, w in self.controls.items()}

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def train(self) -> bool:
        """What **Train** does: validate the controls and start training in a background thread; False (and a
        message in the widget) when an input is invalid or a run is already going."""
        self.widget  # noqa: B018 (builds it)
        with self._lock:
            if self.running:
                self.message.value = "⚠️ <b>a run is going</b>: press Stop first"
                return False
            try:
                req = live.validate(**self.values())
            except ValueError as e:
                self.message.value = f"⚠️ <b>{html.escape(str(e), quote=False)}</b>"
                return False
            self.message.value = ""
            self._stop.clear()
            self.updates = 0
            self.history = None
            self.train_button.disabled, self.stop_button.disabled = True, False
            self.episode.disabled = True
            self._thread = threading.Thread(target=self._run, args=(req,), name="tpo-live-training", daemon=True)
            self._thread.start()
            return True

    def stop(self) -> bool:
        """What **Stop** does: end the run after its current chunk; False when none is going."""
        if not self.running:
            return False
        self._stop.set()
        self.status.value = _html(stopping_text(self.history))
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run ends (True) or ``timeout`` seconds pass (False)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def _run(self, req):
        import jax

        backend = jax.default_backend()
        gen = live.stream(req)
        stopped = False
        try:
            for hist in gen:
                self._show(hist, backend)
                if self._stop.is_set():  # between chunks: the next one is never started
                    stopped = True
                    break
        except Exception as e:  # shown in the widget, not as a traceback
            self.message.value = f"⚠️ <b>training failed</b>: {html.escape(f'{type(e).__name__}: {e}', quote=False)}"
        finally:
            gen.close()
            if stopped:
                self.status.value = _html(stopped_text(self.history))
            self.train_button.disabled, self.stop_button.disabled = False, True
            if self.history is not None and self.history["done"] > 1:
                self.episode.disabled = False

    def _show(self, hist, backend):
        self.history = hist
        self.status.value = _html(live.status_markdown(hist, backend))
        for name in ("error", "grad"):
            sync_figure(self.figures[name], self._figure(name, hist))
        last = max(hist["done"] - 1, 0)
        self._showing_episode = last
        try:
            self.episode.max = max(last, 0)
            self.episode.value = last
        finally:
            self._showing_episode = None
        sync_figure(self.figures["pq"], self._figure("pq", hist))
        self.updates += 1
        if self.on_update is not None:
            self.on_update(hist)

    # ---------------------------------------------------------------------------------------- the book
    def snapshot(self) -> tuple:
        """Train the starting values (with ``snapshot``'s overrides) to the end through :func:`tpo_core.lab.live.stream`;
        (request, last history, [error, grad, pq figures]). What the static book shows."""
        req = live.validate(**{**self.defaults, **self.snapshot_values})
        hist = None
        for hist in live.stream(req):  # noqa: B007 (the last one is what is kept)
            pass
        return req, hist, [self._figure(name, hist) for name in FIGURES]

    def _show_snapshot(self):
        import plotly.io as pio
        from IPython.display import HTML, display

        req, hist, figs = self.snapshot()
        if figures._BOOK_RENDERER not in pio.renderers:
            figures._register_book_renderer()
        for fig in figs:  # the book's renderer: text/html without plotly.js (the page loads it once)
            pio.show(fig, renderer=figures._BOOK_RENDERER)
        names = " and ".join(M.REGISTRY[m].title for m, _ in req.configs)
        scale = req.family.block
        display(
            HTML(
                f"<p><em>A snapshot: {names}, {hist['done'] * scale} {req.family.unit}s of the {req.task} task, "
                "trained by the same engine while this page was built. Run this cell in Jupyter or Colab "
                "for the live widget (its controls, Train and Stop).</em></p>"
            )
        )


def stopping_text(hist) -> str:
    where = ""
    if hist and hist.get("done"):
        scale = family(hist).block
        where = f" (at {hist['done'] * scale} / {hist['total'] * scale} {hist['unit']}s)"
    return f"**stopping** after the current chunk{where}…"


def stopped_text(hist) -> str:
    if not hist or not hist.get("done"):
        return "**stopped** before the first update: press **Train** to start a new run"
    scale = family(hist).block
    return (
        f"**stopped** at {hist['done'] * scale} / {hist['total'] * scale} {hist['unit']}s: the plots show "
        "the run so far; press **Train** to start a new run"
    )


def live_training(snapshot: dict | None = None, **defaults) -> LiveTraining:
    """A :class:`LiveTraining` with these starting values; the last expression of a cell displays it."""
    return LiveTraining(snapshot=snapshot, **defaults)


__all__ = ["LiveTraining", "live_training", "sync_figure", "enable_colab_widgets", "book_build", "DEFAULTS"]
