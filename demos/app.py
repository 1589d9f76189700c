"""TPO, interactively — the Gradio demo.

    python -m demos.app [--host 127.0.0.1] [--port 7860] [--share] [--no-warm] [--max-sessions 256]

Three tabs: the **target explorer** (one group: p_old → q, the gradient p − q, the KL objective q
maximises, GRPO's advantages beside it; numpy, a few ms per move), **live training** (TPO against
GRPO, or any method of :data:`tpo_core.methods.REGISTRY`, streamed chunk by chunk with a Stop button)
and **paper results** (the reproduced tables beside the paper's). Environment: ``TPO_DEMO_HOST``,
``TPO_DEMO_PORT``, ``TPO_DEMO_WARM=0`` (skip the startup warm-up), ``TPO_DEMO_MAX_SESSIONS``. Nothing launches at import;
:func:`build_app` returns the ``gr.Blocks``.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # before gradio is imported

import argparse
import threading
import time

import gradio as gr

from tpo_core import methods as M

from . import explorer as X
from . import paper
from . import training as T
from .inputs import InputError, check_int
from .stop import StopBoard

EXPLORER_CONCURRENCY = 8
TRAINING_CONCURRENCY = 2
QUEUE_MAX_SIZE = 64
# Gradio keeps a record of every session it has served (its own copy of the app's component configs, the latest
# value of every output, the gr.State values) until `state_session_capacity` newer sessions have been seen, 10,000
# by default: a server's memory grew with every new visitor (benchmarks/demo_load.py measures it). The least
# recently used session beyond this many is dropped; for this app that loses only its episode scrubber's history
# (hist_state: the scrubber then does nothing until the next Train); Stop is keyed on the session, not on state.
STATE_SESSION_CAPACITY = 256

EXPLORER_DEFAULTS = dict(K=8, eta=1.0, scores_preset="one success", logp_preset="uniform", seed=0)


# --------------------------------------------------------------------------------------------
# explorer callbacks (plain functions: the tests call them directly)
# --------------------------------------------------------------------------------------------
def explore_values(K, eta, scores_preset, scores_text, logp_preset, logp_text, seed=0):
    """Validated inputs -> (scores text, log-prob text, analysis dict); raises InputError."""
    K = X.check_k(K)
    X.check_eta(eta)
    seed = 0 if seed is None or seed == "" else check_int("seed", seed, 0, 2**31 - 1)  # an empty box: 0
    if scores_preset == "custom":
        scores = X.parse_numbers(scores_text, "scores", K)
    else:
        scores = X.preset_scores(scores_preset, K)
    if logp_preset == "custom":
        logp = X.parse_numbers(logp_text, "log-probs", K)
    else:
        logp = X.preset_logp(logp_preset, K, seed)
    a = X.analyse(K, eta, scores, logp, seed=seed)
    return X.format_numbers(scores), X.format_numbers(logp), a


def explore(K, eta, scores_preset, scores_text, logp_preset, logp_text, seed=0):
    """UI callback: (scores text, log-prob text, message, summary, bars figure, contrast figure).

    On a bad input only the message changes (the last good figures stay on screen)."""
    try:
        s_txt, l_txt, a = explore_values(K, eta, scores_preset, scores_text, logp_preset, logp_text, seed)
    except InputError as e:
        return gr.skip(), gr.skip(), f"⚠️ **{e}**", gr.skip(), gr.skip(), gr.skip()
    return s_txt, l_txt, "", X.summary_markdown(a), X.bars_figure(a), X.contrast_figure(a)


def explore_typed_scores(K, eta, scores_text, logp_preset, logp_text, seed=0):
    """The user typed scores: switch the preset to 'custom' and recompute."""
    return (*explore(K, eta, "custom", scores_text, logp_preset, logp_text, seed), "custom")


def explore_typed_logp(K, eta, scores_preset, scores_text, logp_text, seed=0):
    return (*explore(K, eta, scores_preset, scores_text, "custom", logp_text, seed), "custom")


# --------------------------------------------------------------------------------------------
# training callbacks
# --------------------------------------------------------------------------------------------
def _backend() -> str:
    import jax

    return jax.default_backend()


def method_choices(task: str) -> list:
    return [(f"{M.REGISTRY[n].title} ({n})", n) for n in T.family(task).methods]


def on_task_change(task):
    family = T.family(task)
    token = family.is_token
    keep = [m for m in T.DEFAULTS["methods"] if m in family.methods]
    return (
        gr.update(choices=method_choices(task), value=keep),
        *(gr.update(visible=token) for _ in range(5)),
        gr.update(visible=not token),
        gr.update(visible=token),
        gr.update(visible=token),
        T.EXPLAIN[task],
        gr.update(label=family.zero_label),
    )


STOPS = StopBoard()  # every session's runs and Stop requests (demos/stop.py)
STOP_WAIT_S = 600.0  # await_stopped gives up after this long (a chunk takes seconds)


def _session(request) -> str:
    return getattr(request, "session_hash", None) or "local"


def request_stop(session: str) -> bool:
    """Flag ``session``'s running run to stop; False when it has none running."""
    return STOPS.request(session) is not None


def train_stream(
    task, methods, reward, H, B, K, eta, episodes, n_seeds, seed, bandit_steps, request: gr.Request = None
):
    """Generator callback (the Train button): validated request -> streamed (status, 4 figures, history state,
    episode slider). Ends early, with the "stopped" status, when Stop is pressed in the same session."""
    try:
        req = T.validate(task, methods, reward, H, B, K, eta, episodes, n_seeds, seed, bandit_steps)
    except InputError as e:
        raise gr.Error(str(e), duration=None) from None
    session = _session(request)
    backend = _backend()
    run_id = STOPS.begin(session)
    last = None
    try:
        for hist in T.stream(req):
            n_tracked = max(hist["done"] - 1, 0)
            figures = T.figures(hist, backend)
            stop = STOPS.take(session)
            last = stopped_status(hist) if stop else figures[0]
            yield (
                last,
                *figures[1:],
                hist,
                gr.update(maximum=max(n_tracked, 1), value=n_tracked, interactive=hist["done"] > 1),
            )
            if stop:
                return
    finally:
        STOPS.end(session, run_id, last if last is not None else stopped_status(None))


def stop_run(hist=None, request: gr.Request = None):
    """Stop's callback: ask this session's running run to end at its next chunk and say so; returns (status,
    the run's id for :func:`await_stopped`). With no run going in this session the status is left as it is."""
    run_id = STOPS.request(_session(request))
    if run_id is None:
        return gr.update(), None
    return stopping_status(hist), run_id


async def await_stopped(run_id, request: gr.Request = None):
    """Stop's follow-up: once run ``run_id`` has ended, the status of its last update ("stopped at …", or
    "done" if it finished on its own meanwhile). Nothing changes if the session has started a newer run since
    (Train pressed right after Stop) or if the run has not ended within ``STOP_WAIT_S``."""
    if run_id is None:
        return gr.update()
    final = await STOPS.wait_final(run_id, STOP_WAIT_S)
    if final is None or not STOPS.is_latest(_session(request), run_id):
        return gr.update()
    return final


def stopping_status(hist=None):
    """The status between Stop and the end of the run's current chunk."""
    where = ""
    if hist and hist.get("done"):
        scale = T.family(hist).block
        where = f" (at {hist['done'] * scale} / {hist['total'] * scale} {hist['unit']}s)"
    return f"**stopping** after the current chunk{where}…"


def stopped_status(hist=None):
    """The status after Stop: where the run stopped (its plots stay on screen)."""
    if not hist or not hist.get("done"):
        return "**stopped** before the first update — press **Train** to start a new run"
    scale = T.family(hist).block
    return (
        f"**stopped** at {hist['done'] * scale} / {hist['total'] * scale} {hist['unit']}s — the plots show the "
        "run so far; press **Train** to start a new run"
    )


def show_episode(hist, episode):
    if not hist:
        return gr.skip()
    return T.pq_figure(hist, int(episode))


# --------------------------------------------------------------------------------------------
# paper tab
# --------------------------------------------------------------------------------------------
def paper_view():
    """(markdown: our reproduced tables or a note, then the paper's tables; figure choices; first figure html)."""
    body, note = paper.load_report()
    if body is None:
        md = (
            f"ℹ️ {note} Run the reproduction presets (`python -m tpo_core reproduce <preset> --budget cpu "
            "--out results/<preset>`, see `results/README.md`) to fill `results/`; until then only the "
            "**paper's** numbers are shown below.\n\n" + paper.PAPER_TABLES
        )
    else:
        md = (
            "## Reproduced here (from `results/`, computed by `tpo_core.lab.report`)\n\n"
            + body
            + "\n\n---\n\n"
            + paper.PAPER_TABLES
        )
    figs = [(f.parent.name, str(f)) for f in paper.figure_files()]
    return md, figs, paper.figure_iframe(figs[0][1]) if figs else ""


def reload_paper():
    md, figs, frame = paper_view()
    return md, gr.update(choices=figs, value=figs[0][1] if figs else None, visible=bool(figs)), frame


# --------------------------------------------------------------------------------------------
# the app
# --------------------------------------------------------------------------------------------
INTRO = """\
# Target Policy Optimization, interactively
TPO turns a group of K scored samples into a **target distribution** q ∝ p_old·exp(u/η) and fits the policy to it
with cross-entropy, so its gradient p − q **is zero when the policy matches the target** (and at the first epoch on
an all-equal group, where q = p_old); GRPO's advantage-weighted gradient has no such fixed point. The paper found
TPO's gradient norm decaying as it converges while GRPO's stays high; the **live training** tab's default run (the
MNIST bandit) shows that contrast in a minute. The optimizers (Adam, Muon) rescale the gradient, so a small gradient
does not mean a small *step*: the training tab plots both. Move η and K in the **target explorer** to see q.
"""


def _explorer_tab():
    """The target explorer tab: one group's p_old → q as η, K, the scores and the log-probs move."""
    s0, l0, a0 = explore_values(**{**EXPLORER_DEFAULTS, "scores_text": "", "logp_text": ""})
    with gr.Tab("Target explorer", id="explorer"):
        with gr.Row():
            with gr.Column(scale=1, min_width=280):
                k = gr.Slider(
                    2, X.MAX_K, value=EXPLORER_DEFAULTS["K"], step=1, label="K (group size)", elem_id="explorer-k"
                )
                eta = gr.Slider(
                    0.05,
                    5.0,
                    value=EXPLORER_DEFAULTS["eta"],
                    step=0.05,
                    label="η (how far q may move from p_old)",
                    elem_id="explorer-eta",
                )
                scores_preset = gr.Dropdown(
                    list(X.SCORE_PRESETS),
                    value=EXPLORER_DEFAULTS["scores_preset"],
                    label="scores preset",
                    elem_id="explorer-scores-preset",
                )
                scores_text = gr.Textbox(s0, label="scores s₁ … s_K (edit freely)", elem_id="explorer-scores")
                logp_preset = gr.Dropdown(
                    list(X.LOGP_PRESETS),
                    value=EXPLORER_DEFAULTS["logp_preset"],
                    label="behaviour log-probs ℓ_old",
                    elem_id="explorer-logp-preset",
                )
                seed = gr.Number(EXPLORER_DEFAULTS["seed"], precision=0, label="seed (random log-probs)")
                logp_text = gr.Textbox(l0, label="log-probs ℓ_old,1 … ℓ_old,K (edit freely)", elem_id="explorer-logp")
                message = gr.Markdown("", elem_id="explorer-message")
            with gr.Column(scale=3):
                bars = gr.Plot(X.bars_figure(a0), label="p_old, q, u and the gradient p − q", elem_id="explorer-bars")
                with gr.Row():
                    with gr.Column(scale=3):
                        contrast = gr.Plot(
                            X.contrast_figure(a0), label="TPO against GRPO on this group", elem_id="explorer-contrast"
                        )
                    with gr.Column(scale=2):
                        summary = gr.Markdown(X.summary_markdown(a0), elem_id="explorer-summary")
        outputs = [scores_text, logp_text, message, summary, bars, contrast]
        # every explorer event shares one queue: a slider drag runs only its last value
        queue = dict(
            concurrency_limit=EXPLORER_CONCURRENCY,
            concurrency_id="explorer",
            show_progress="hidden",
            trigger_mode="always_last",
        )
        gr.on(
            [k.change, eta.change, scores_preset.input, logp_preset.input, seed.change],
            explore,
            inputs=[k, eta, scores_preset, scores_text, logp_preset, logp_text, seed],
            outputs=outputs,
            api_name="explore",
            **queue,
        )
        # typing into a text box: the same explorer, and its preset menu switches to "custom"
        typed = (
            (scores_text, scores_preset, explore_typed_scores, [k, eta, scores_text, logp_preset, logp_text, seed]),
            (logp_text, logp_preset, explore_typed_logp, [k, eta, scores_preset, scores_text, logp_text, seed]),
        )
        for text, preset, fn, inputs in typed:
            gr.on(
                [text.input, text.submit],
                fn,
                inputs=inputs,
                outputs=outputs + [preset],
                api_visibility="private",
                **queue,
            )


def _training_tab():
    """The live training tab: methods trained side by side, streamed chunk by chunk, with Stop."""
    default_task = T.DEFAULTS["task"]
    token0 = T.family(default_task).is_token
    with gr.Tab("Live training", id="training"):
        hist_state = gr.State(None)  # this session's last run (for the episode scrubber)
        stop_id = gr.State(None)  # the run a Stop click asked to end (for await_stopped)
        with gr.Row():
            with gr.Column(scale=1, min_width=280):
                task = gr.Radio(list(T.TASKS), value=default_task, label="task", elem_id="train-task")
                methods = gr.CheckboxGroup(
                    method_choices(default_task),
                    value=T.DEFAULTS["methods"],
                    label="methods (≤ 4)",
                    elem_id="train-methods",
                )
                reward = gr.Dropdown(
                    list(T.REWARDS),
                    value=T.DEFAULTS["reward"],
                    label="reward (reverse copy, V = 2)",
                    elem_id="train-reward",
                    visible=token0,
                )
                # the token task's integer sliders: (the key of T.DEFAULTS, low, high, label)
                h, tk, b = (
                    gr.Slider(
                        lo,
                        hi,
                        value=T.DEFAULTS[key],
                        step=1,
                        label=label,
                        elem_id=f"train-{key.lower()}",
                        visible=token0,
                    )
                    for key, lo, hi, label in (
                        ("H", T.H_MIN, T.H_MAX, "H (sequence length)"),
                        ("K", 2, T.MAX_TRAIN_K, "K (group size)"),
                        ("B", 1, T.MAX_B, "B (prompts per episode)"),
                    )
                )
                episodes = gr.Number(
                    T.DEFAULTS["episodes"],
                    precision=0,
                    label=f"episodes (≤ {T.MAX_EPISODES})",
                    elem_id="train-episodes",
                    visible=token0,
                )
                steps = gr.Number(
                    T.DEFAULTS["bandit_steps"],
                    precision=0,
                    label="MNIST steps (≤ 10,000)",
                    visible=not token0,
                    elem_id="train-steps",
                )
                teta = gr.Slider(0.05, 5.0, value=T.DEFAULTS["eta"], step=0.05, label="η (TPO)", elem_id="train-eta")
                with gr.Row():
                    n_seeds = gr.Slider(1, T.MAX_SEEDS, value=T.DEFAULTS["n_seeds"], step=1, label="seeds")
                    tseed = gr.Number(T.DEFAULTS["seed"], precision=0, label="first seed")
                with gr.Row():
                    start = gr.Button("Train", variant="primary", elem_id="train-start")
                    stop = gr.Button("Stop", variant="stop", elem_id="train-stop")
                gr.Markdown(
                    "Single-sample methods (PPO, PG, DG) are interaction-matched: B·K prompts and "
                    "lr·√K. A new configuration compiles once, then is cached; the default one "
                    "is compiled at startup. Two runs train at a time; others wait in the queue. "
                    "Stop ends a run after its current chunk; Train pressed while a run is going "
                    "starts the new run when that one ends."
                )
            with gr.Column(scale=3):
                status = gr.Markdown(
                    f"Press **Train**: {' and '.join(M.REGISTRY[m].title for m in T.DEFAULTS['methods'])}"
                    f" learn the {default_task} side by side.",
                    elem_id="train-status",
                )
                with gr.Row():
                    err_plot = gr.Plot(label="error", elem_id="train-error")
                    grad_plot = gr.Plot(label="gradient norm and step size", elem_id="train-grad")
                with gr.Row():
                    zero_plot = gr.Plot(label=T.family(default_task).zero_label, elem_id="train-zero")
                    pq_plot = gr.Plot(label="tracked group", elem_id="train-pq", visible=token0)
                episode = gr.Slider(
                    0,
                    1,
                    value=0,
                    step=1,
                    interactive=False,
                    visible=token0,
                    label="episode shown in the tracked-group plot",
                    elem_id="train-episode",
                )
                explain = gr.Markdown(T.EXPLAIN[default_task], elem_id="train-explain")
        task.change(
            on_task_change,
            inputs=task,
            outputs=[methods, reward, h, tk, b, episodes, steps, pq_plot, episode, explain, zero_plot],
            api_visibility="private",
            show_progress="hidden",
        )
        start.click(
            train_stream,
            inputs=[task, methods, reward, h, b, tk, teta, episodes, n_seeds, tseed, steps],
            outputs=[status, err_plot, grad_plot, zero_plot, pq_plot, hist_state, episode],
            api_name="train",
            concurrency_limit=TRAINING_CONCURRENCY,
            concurrency_id="training",
            show_progress="minimal",
            show_progress_on=[status],
            trigger_mode="always_last",
        )  # Train pressed while a run ends: the next run waits
        stopping = stop.click(
            stop_run, hist_state, [status, stop_id], api_visibility="private", concurrency_id="explorer"
        )
        stopping.then(
            await_stopped, stop_id, status, api_visibility="private", concurrency_limit=None, show_progress="hidden"
        )
        episode.release(
            show_episode,
            inputs=[hist_state, episode],
            outputs=pq_plot,
            api_visibility="private",
            show_progress="hidden",
            concurrency_id="explorer",
        )


def _paper_tab():
    """The paper results tab: the reproduced tables and figures beside the paper's."""
    with gr.Tab("Paper results", id="paper"):
        md0, figs0, frame0 = paper_view()
        reload_btn = gr.Button("Reload results/", size="sm")
        fig_choice = gr.Dropdown(
            figs0,
            value=figs0[0][1] if figs0 else None,
            visible=bool(figs0),
            label="reproduced figure (results/<preset>/figure.html)",
        )
        fig_frame = gr.HTML(frame0, elem_id="paper-figure")
        paper_md = gr.Markdown(md0, elem_id="paper-md")
        fig_choice.input(paper.figure_iframe, fig_choice, fig_frame, api_visibility="private")
        reload_btn.click(reload_paper, None, [paper_md, fig_choice, fig_frame], api_name="paper")


def build_app() -> gr.Blocks:
    """The whole demo as a ``gr.Blocks`` with its queue configured (not launched): one function per tab."""
    from tpo_core.lab import figures

    figures.setup()  # the shared plotly template (plotly_white), as in the book
    with gr.Blocks(title="TPO, interactively") as demo:
        gr.Markdown(INTRO)
        _explorer_tab()
        _training_tab()
        _paper_tab()

    demo.queue(default_concurrency_limit=EXPLORER_CONCURRENCY, max_size=QUEUE_MAX_SIZE)
    return demo


# --------------------------------------------------------------------------------------------
# startup warm-up and the command line
# --------------------------------------------------------------------------------------------
WARMUP = {"state": "not started", "seconds": None}


def start_warmup() -> threading.Thread:
    """Compile the default configuration's programs in a background thread (cached on disk too)."""

    def work():
        WARMUP["state"] = "running"
        try:
            req = T.validate(**{k: v for k, v in T.DEFAULTS.items()})
            WARMUP["seconds"] = T.warm(req)
            WARMUP["state"] = "done"
            print(f"[demo] warm-up done: default training config compiled in {WARMUP['seconds']:.1f} s", flush=True)
        except Exception as e:  # warm-up is an optimisation; the app works without it
            WARMUP["state"] = f"failed: {e}"
            print(f"[demo] warm-up failed: {e}", flush=True)

    thread = threading.Thread(target=work, name="tpo-demo-warmup", daemon=True)
    thread.start()
    return thread


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m demos.app", description="TPO, interactively (Gradio demo)")
    ap.add_argument(
        "--host",
        default=os.environ.get("TPO_DEMO_HOST", "127.0.0.1"),
        help="interface to bind (default 127.0.0.1; env TPO_DEMO_HOST)",
    )
    ap.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("TPO_DEMO_PORT", "7860")),
        help="port (default 7860; env TPO_DEMO_PORT)",
    )
    ap.add_argument("--share", action="store_true", help="also create a public gradio.live link (off by default)")
    ap.add_argument(
        "--no-warm",
        action="store_true",
        default=os.environ.get("TPO_DEMO_WARM") == "0",
        help="skip compiling the default training config at startup (env TPO_DEMO_WARM=0)",
    )
    ap.add_argument(
        "--max-sessions",
        type=_positive_int,
        default=int(os.environ.get("TPO_DEMO_MAX_SESSIONS", STATE_SESSION_CAPACITY)),
        help="sessions whose state the server keeps, least recently used dropped first (default "
        f"{STATE_SESSION_CAPACITY}; env TPO_DEMO_MAX_SESSIONS)",
    )
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from tpo_core.runtime import enable_compile_cache

    shared_mnist = paper.ROOT.parent / "shared" / "data" / "mnist"  # as the Makefile and tests/conftest.py do
    if "TPO_DATA_DIR" not in os.environ and shared_mnist.is_dir():
        os.environ["TPO_DATA_DIR"] = str(shared_mnist)

    cache = enable_compile_cache()
    t0 = time.perf_counter()
    demo = build_app()
    print(
        f"[demo] JAX backend {_backend()}, compile cache {cache}, app built in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    if not args.no_warm:
        start_warmup()
    demo.launch(
        server_name=args.host,
        server_port=args.port,
        share=args.share,
        ssr_mode=False,
        show_error=True,
        allowed_paths=[str(paper.results_dir())],
        state_session_capacity=args.max_sessions,
    )


if __name__ == "__main__":
    main()
