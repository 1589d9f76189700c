"""The notebook widget (tpo_core.lab.widget), kernel side, no browser: Train streams the engine's values into the
FigureWidgets chunk by chunk, Stop ends a run between chunks, bad input shows validate's message, the book build
gets a static snapshot, Colab's widget manager is switched on. The values are checked against an independent
run of tpo_core.lab.live.stream and against TPO's closed-form target, never against what the widget computed."""

import subprocess
import sys
import time

import numpy as np
import pytest

from tpo_core.lab import live, widget

# the same tiny token task as the demo tests (tests/test_demo_callbacks.py); 12 episodes = chunks 1, 5, 5, 1
TINY = dict(
    task="token reversal", methods=["tpo"], reward="terminal", H=3, B=8, K=4, eta=1.0, episodes=12, n_seeds=1, seed=0
)


def _trace(fig, name):
    return next(t for t in fig.data if t.name == name)


def _record(w):
    """What the FigureWidgets hold after each redraw (read from the widgets themselves)."""
    seen = []

    def on_update(hist):
        err, grad, pq = (w.figures[k] for k in ("error", "grad", "pq"))
        row = {"done": hist["done"], "n_traces": len(err.data)}
        if hist["done"]:
            row["x"] = np.asarray(_trace(err, "tpo").x)
            row["error"] = np.asarray(_trace(err, "tpo").y)
            row["grad"] = np.asarray(_trace(grad, "TPO ‖∇L‖").customdata)
            row["step"] = np.asarray(_trace(grad, "TPO ‖Δθ‖").customdata)
            row["p"] = [np.asarray(t.y) for t in pq.data if t.name.startswith("p")]
            row["q"] = np.asarray(_trace(pq, "q (TPO target)").y)
            row["pq_title"] = pq.layout.title.text
        seen.append(row)

    w.on_update = on_update
    return seen


def test_train_draws_the_engines_values_chunk_by_chunk():
    w = widget.LiveTraining(**TINY)
    seen = _record(w)
    assert w.train()
    assert w.stop_button.disabled is False and w.train_button.disabled is True
    assert w.wait(600), "the run did not end"
    assert w.train_button.disabled is False and w.stop_button.disabled is True
    assert w.message.value == ""
    assert "12 / 12 episodes" in w.status.value and "done" in w.status.value

    # one redraw before any compute, then one per chunk: 1 episode, then chunks of 5, the remainder in 1s
    assert [r["done"] for r in seen] == [0, 1, 6, 11, 12]
    assert seen[0]["n_traces"] == 0
    for r in seen[1:]:
        assert list(r["x"]) == list(range(r["done"]))  # the curve grew by the chunk

    # an independent run of the engine (same config, same seed: the same numbers)
    *_, ref = live.stream(live.validate(**TINY))
    m = ref["metrics"]["tpo"]
    for r in seen[1:]:
        t = r["done"]
        np.testing.assert_allclose(r["error"], 100 * m["error"][0, :t], atol=1e-4)
        np.testing.assert_allclose(r["grad"], m["grad_norm"][0, :t], rtol=1e-5, atol=1e-9)
        np.testing.assert_allclose(r["step"], m["step_norm"][0, :t], rtol=1e-5, atol=1e-9)
        assert r["pq_title"].endswith(f"episode {t - 1}")  # the latest episode's group
        np.testing.assert_allclose(r["q"], m["track_q"][0, t - 1, 0], atol=1e-6)
        assert len(r["p"]) == 4  # p before each of the 4 epochs
    # the plotted q is TPO's closed form q = softmax(log p_old + u / η) of the plotted p_old and the scores
    last = seen[-1]
    p_old = last["p"][0]
    s = m["track_scores"][0, -1, 0].astype(float)
    u = (s - s.mean()) / s.std() if s.std() > 1e-6 else s - s.mean()
    q = p_old * np.exp(u / TINY["eta"])
    np.testing.assert_allclose(last["q"], q / q.sum(), atol=1e-4)
    assert abs(p_old.sum() - 1) < 1e-5

    # the scrubber shows an earlier episode's group once the run is over
    assert not w.episode.disabled and w.episode.max == 11
    w.episode.value = 3
    assert w.figures["pq"].layout.title.text.endswith("episode 3")
    np.testing.assert_allclose(
        np.asarray(_trace(w.figures["pq"], "q (TPO target)").y), m["track_q"][0, 3, 0], atol=1e-6
    )


def test_stop_ends_the_run_between_chunks():
    w = widget.LiveTraining(**{**TINY, "episodes": live.MAX_EPISODES})
    w.controls["K"].value = 1
    assert w.train() is False and "K must be between 2 and 16, got 1" in w.message.value
    w.controls["K"].value = TINY["K"]
    assert w.train()
    assert w.message.value == ""  # a valid Train clears the last message
    t0 = time.time()
    while w.updates < 4 and w.running and time.time() - t0 < 600:
        time.sleep(0.05)
    assert w.running, "the run ended before Stop"
    done_at_stop = w.history["done"]
    assert w.stop()
    assert "stopping" in w.status.value
    assert w.wait(120), "Stop did not end the training thread"
    assert not w.running and not w._thread.is_alive()
    done = w.history["done"]
    # at most the chunk that was running when Stop was pressed finishes; none starts after it
    assert done_at_stop <= done <= done_at_stop + live.CHUNK < live.MAX_EPISODES
    assert f"stopped</b> at {done} / {live.MAX_EPISODES} episodes" in w.status.value
    assert len(_trace(w.figures["error"], "tpo").x) == done
    assert w.train_button.disabled is False and w.stop() is False


def test_a_bad_eta_shows_the_configs_message():
    """The widget's validate applies the configs' η rule: its message is the TokenConfig's ValueError."""
    import html

    from tpo_core.config import TokenConfig

    with pytest.raises(ValueError) as cfg:
        TokenConfig(eta=-0.25)
    w = widget.LiveTraining(**TINY)
    w.controls["eta"].value = -0.25
    assert w.train() is False and html.escape(str(cfg.value), quote=False) in w.message.value


@pytest.mark.parametrize(
    "change,expected",
    [
        (dict(eta=0.0), "eta must be a finite number &gt; 0, got 0.0"),
        (dict(eta=500.0), "eta must be at most 100, got 500.0"),
        (dict(H=1), "H must be between 2 and 10, got 1"),
        (dict(K=99), "K must be between 2 and 16, got 99"),
        (dict(episodes=0), "episodes must be between 1 and 2000, got 0"),
        (dict(n_seeds=9), "seeds must be between 1 and 4, got 9"),
        (dict(methods=[]), "methods: pick at least one method"),
    ],
)
def test_bad_input_shows_a_message_and_trains_nothing(change, expected):
    w = widget.LiveTraining(**TINY)
    for k, v in change.items():
        w.controls[k].value = v
    assert w.train() is False
    assert expected in w.message.value and "Traceback" not in w.message.value
    assert w._thread is None and w.history is None and w.updates == 0


def test_unknown_starting_value_is_a_value_error():
    with pytest.raises(ValueError, match="unknown control.*lr"):
        widget.LiveTraining(lr=0.1)


def test_task_switch_swaps_the_methods_and_the_controls():
    w = widget.live_training(**TINY)
    c = w.controls
    assert {v for _, v in c["methods"].options} == set(live.M.TOKEN_METHODS)
    assert c["bandit_steps"].layout.display == "none" and c["H"].layout.display is None
    c["task"].value = "MNIST bandit"
    assert {v for _, v in c["methods"].options} == set(live.M.BANDIT_METHODS)
    assert c["H"].layout.display == "none" and c["bandit_steps"].layout.display is None
    assert c["methods"].value == ("tpo",)  # kept: TPO runs on both tasks


def test_book_build_shows_a_static_snapshot(monkeypatch):
    """TPO_BOOK_BUILD=1: no widget (no kernel will be there), the figures of a short run as HTML, one line."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.display import display
    from IPython.utils.capture import capture_output

    monkeypatch.setenv("TPO_BOOK_BUILD", "1")
    InteractiveShell.instance()
    w = widget.live_training(snapshot=dict(episodes=3), **TINY)
    with capture_output() as cap:
        display(w)  # what a cell's last expression does
    bundles = [o.data for o in cap.outputs]
    assert all("application/vnd.jupyter.widget-view+json" not in b for b in bundles)
    html = [b["text/html"] for b in bundles]
    assert len(html) == 4
    assert all("Plotly.newPlot" in h and "<script src" not in h for h in html[:3])  # plotly.js: the page's own
    assert "error of each episode" in html[0] and "‖∇L‖" in html[1] and "tracked group" in html[2]
    assert "TPO, 3 episodes" in html[3] and "Jupyter or Colab" in html[3]


def test_colab_custom_widget_manager(monkeypatch):
    import types

    calls = []
    output = types.SimpleNamespace(enable_custom_widget_manager=lambda: calls.append(1))
    colab = types.ModuleType("google.colab")
    colab.output = output
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    monkeypatch.setitem(sys.modules, "google.colab.output", output)
    assert widget.enable_colab_widgets() is True and calls == [1]
    # a google.colab without it (tests/test_colab.py's stand-in) is not an error
    monkeypatch.setitem(sys.modules, "google.colab.output", types.SimpleNamespace())
    colab.output = sys.modules["google.colab.output"]
    assert widget.enable_colab_widgets() is False
    monkeypatch.delitem(sys.modules, "google.colab")
    assert widget.enable_colab_widgets() is False


def test_the_package_runs_it_without_demos_or_gradio():
    """Colab installs only tpo_core: the engine and the widget import neither demos/ nor gradio, and the demo's
    training module is the same engine (one chunk loop)."""
    code = (
        "import sys, tpo_core.lab.live, tpo_core.lab.widget; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('demos', 'gradio')]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip() == "[]"
    from demos import inputs
    from demos import training as T

    assert T.stream is live.stream and T.validate.__wrapped__ is live.validate and T.run_chunk is live.run_chunk
    assert T.InputError is inputs.InputError and issubclass(T.InputError, ValueError)
