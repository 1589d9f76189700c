"""The demo's callbacks as plain functions: explorer math against tpo_core, validation messages, and a
tiny training stream that yields updates and stops."""

import dataclasses
import math

import gradio as gr
import jax.numpy as jnp
import numpy as np
import pytest

import tpo_core
from demos import app
from demos import explorer as X
from demos import training as T

# one tiny training configuration shared by the demo tests (one compiled chunk shape: episodes <= CHUNK)
TINY = dict(
    task="token reversal",
    methods=["tpo"],
    reward="terminal",
    H=3,
    B=8,
    K=4,
    eta=1.0,
    episodes=4,
    n_seeds=1,
    seed=0,
    bandit_steps=1000,
)


def _train_args(**changes):
    d = {**TINY, **changes}
    return [
        d[k] for k in ("task", "methods", "reward", "H", "B", "K", "eta", "episodes", "n_seeds", "seed", "bandit_steps")
    ]


# --------------------------------------------------------------------------------------------
# explorer math
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("K,eta,seed", [(2, 1.0, 0), (8, 0.25, 1), (8, 3.0, 2), (33, 1.0, 3), (64, 0.05, 4)])
def test_explorer_matches_tpo_core(K, eta, seed):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 3, K).astype(float)
    scores[0] = 5.0  # never a zero-variance group
    logp = rng.normal(-10.0, 2.0, K)
    a = X.analyse(K, eta, scores, logp)
    q_ref = np.asarray(tpo_core.tpo_target(jnp.asarray(logp), jnp.asarray(scores), eta))
    np.testing.assert_allclose(a["q"], q_ref, atol=2e-6)
    np.testing.assert_allclose(a["u"], np.asarray(tpo_core.standardize(jnp.asarray(scores))), atol=1e-5)
    np.testing.assert_allclose(a["adv"], np.asarray(tpo_core.grpo_advantages(jnp.asarray(scores))), atol=1e-4)
    p_old = np.exp(logp - logp.max()) / np.exp(logp - logp.max()).sum()
    np.testing.assert_allclose(a["p_old"], p_old, atol=1e-12)
    np.testing.assert_allclose(a["grad"], p_old - q_ref, atol=2e-6)
    assert a["q"].sum() == pytest.approx(1.0)


def test_q_maximises_the_kl_objective():
    """J(q) equals the closed form η log E_p_old[exp(u/η)] and beats every perturbation."""
    rng = np.random.default_rng(7)
    K, eta = 10, 0.7
    scores = rng.random(K)
    logp = rng.normal(size=K)
    a = X.analyse(K, eta, scores, logp)
    p_old = np.exp(logp) / np.exp(logp).sum()
    u = (scores - scores.mean()) / scores.std()
    assert a["J_q"] == pytest.approx(eta * math.log((p_old * np.exp(u / eta)).sum()), abs=1e-9)
    # independent random distributions on the simplex never beat q
    for r in rng.dirichlet(np.ones(K), size=200):
        j = (r * u).sum() - eta * (r * np.log(r / p_old)).sum()
        assert j <= a["J_q"] + 1e-12
    assert a["J_alt_best"] <= a["J_q"] + 1e-12
    assert a["J_p_old"] < a["J_q"] and a["J_onehot"] < a["J_q"]


def test_all_fail_group_gives_q_equal_p_old_and_zero_gradient():
    s_txt, l_txt, a = app.explore_values(6, 1.0, "all fail", "", "random", "", 3)
    assert s_txt == "0, 0, 0, 0, 0, 0"
    assert a["zero_variance"]
    np.testing.assert_allclose(a["q"], a["p_old"], atol=1e-12)
    assert np.abs(a["grad"]).max() < 1e-12 and np.abs(a["adv"]).max() == 0
    assert "Zero-variance group" in X.summary_markdown(a)


def test_eta_limits_of_the_target():
    """η → ∞ keeps q at p_old; small η puts (almost) all mass on the success."""
    _, _, wide = app.explore_values(8, 100.0, "one success", "", "success unlikely", "", 0)
    _, _, sharp = app.explore_values(8, 0.05, "one success", "", "success unlikely", "", 0)
    assert abs(wide["q"][0] - wide["p_old"][0]) < 0.001
    assert wide["p_old"][0] == pytest.approx(0.02)
    assert sharp["q"][0] > 0.999


def test_presets_follow_k():
    s_txt, l_txt, a = app.explore_values(5, 1.0, "graded", "", "uniform", "", 0)
    assert s_txt == "1, 0.75, 0.5, 0.25, 0"
    np.testing.assert_allclose(a["p_old"], np.full(5, 0.2))
    s_txt, _, _ = app.explore_values(4, 1.0, "a tie (two successes)", "", "uniform", "", 0)
    assert s_txt == "1, 1, 0, 0"


def test_explore_callback_outputs_figures_with_the_plotted_q():
    out = app.explore(8, 0.5, "custom", "1 0 0 0 0 0 0 0.5", "custom", "-1,-2,-3,-4,-5,-6,-7,-8", 0)
    s_txt, l_txt, message, summary, bars, contrast = out
    assert message == "" and s_txt == "1, 0, 0, 0, 0, 0, 0, 0.5"
    q_trace = [t for t in bars.data if t.name == "q"][0]
    q_ref = np.asarray(tpo_core.tpo_target(jnp.arange(-1.0, -9.0, -1.0), jnp.asarray([1, 0, 0, 0, 0, 0, 0, 0.5]), 0.5))
    np.testing.assert_allclose(np.asarray(q_trace.y), q_ref, atol=1e-6)
    assert "q beats every perturbed alternative" in summary
    assert len(contrast.data) == 2


def test_typed_scores_switch_preset_to_custom():
    out = app.explore_typed_scores(4, 1.0, "0, 1, 0, 0", "uniform", "", 0)
    assert out[-1] == "custom" and out[2] == ""
    q = [t for t in out[4].data if t.name == "q"][0].y
    assert int(np.argmax(q)) == 1


# --------------------------------------------------------------------------------------------
# validation messages (explorer: shown in the message box, figures untouched)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args,expected",
    [
        ((8, 0, "one success", "", "uniform", ""), "eta must be a finite number > 0, got 0.0"),
        ((8, -1.5, "one success", "", "uniform", ""), "eta must be a finite number > 0, got -1.5"),
        ((8, 101, "one success", "", "uniform", ""), "eta must be at most 100, got 101.0"),
        ((1, 1.0, "one success", "", "uniform", ""), "K must be between 2 and 64, got 1"),
        ((65, 1.0, "one success", "", "uniform", ""), "K must be between 2 and 64, got 65"),
        ((4, 1.0, "custom", "1, 0, zero, 0", "uniform", ""), "scores: entry 3 ('zero') is not a number"),
        ((4, 1.0, "custom", "1, 0, 0", "uniform", ""), "scores: got 3 numbers but K = 4"),
        ((4, 1.0, "custom", "", "uniform", ""), "scores: enter 4 numbers"),
        ((4, 1.0, "custom", "1, nan, 0, 0", "uniform", ""), "scores: entry 2 ('nan') is not a finite number"),
        ((3, 1.0, "one success", "", "custom", "-1, -2"), "log-probs: got 2 numbers but K = 3"),
        ((3, 1.0, "one success", "", "custom", "-1, -2, p"), "log-probs: entry 3 ('p') is not a number"),
        ((3, "abc", "one success", "", "uniform", ""), "eta must be a finite number > 0, got 'abc'"),
        ((3, 1.0, "one success", "", "random", ""), "seed must be between 0 and 2147483647, got -1"),
    ],
)
def test_explorer_validation_messages(args, expected):
    seed = -1 if "seed" in expected else 0
    out = app.explore(*args, seed)
    assert expected in out[2]
    assert all(o is not None and not isinstance(o, str) for o in (out[3], out[4], out[5]))  # gr.skip()s
    with pytest.raises(X.InputError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        app.explore_values(*args, seed)


# --------------------------------------------------------------------------------------------
# training: validation, then a tiny stream
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "changes,expected",
    [
        (dict(eta=0), "eta must be a finite number > 0"),
        (dict(K=1), "K must be between 2 and 16, got 1"),
        (dict(K=17), "K must be between 2 and 16, got 17"),
        (dict(H=1), "H must be between 2 and 10, got 1"),
        (dict(H=11), "H must be between 2 and 10, got 11"),
        (dict(episodes=2001), "episodes must be between 1 and 2000, got 2001"),
        (dict(episodes=2.5), "episodes must be a whole number"),
        (dict(methods=[]), "methods: pick at least one method"),
        (dict(methods=["tpo", "grpo", "ppo", "dg", "rloo"]), "methods: pick at most 4"),
        (dict(methods=["ce"]), "methods: 'ce' does not run on the token task"),
        (dict(methods=["tpo_token"]), "methods: tpo_token needs a dense reward"),
        (dict(reward="dense"), "reward must be one of"),
        (dict(task="chess"), "task must be one of"),
        (dict(task="MNIST bandit", methods=["rloo"]), "methods: 'rloo' does not run on the MNIST bandit"),
        (dict(task="MNIST bandit", bandit_steps=150), "MNIST steps must be a multiple of 100"),
        (dict(task="MNIST bandit", bandit_steps=20000), "MNIST steps must be between 100 and 10000"),
        (dict(n_seeds=5), "seeds must be between 1 and 4"),
    ],
)
def test_training_validation_messages(changes, expected):
    gen = app.train_stream(*_train_args(**changes))
    with pytest.raises(gr.Error) as err:
        next(gen)
    assert expected in str(err.value.message)


@pytest.mark.parametrize("eta", [-0.5, 0.0, float("nan")])
def test_one_eta_rule_gives_one_message_through_the_config_and_both_tabs(eta):
    """The configs' check is the rule: the explorer tab and the training tab show its ValueError's text."""
    with pytest.raises(ValueError) as cfg:
        tpo_core.TokenConfig(eta=eta)
    message = str(cfg.value)
    assert message.startswith("eta must be a finite number > 0, got ")
    with pytest.raises(ValueError) as bandit:
        tpo_core.BanditConfig(eta=eta)
    assert str(bandit.value) == message
    assert app.explore(8, eta, "one success", "", "uniform", "", 0)[2] == f"⚠️ **{message}**"
    with pytest.raises(gr.Error) as err:
        next(app.train_stream(*_train_args(eta=eta)))
    assert err.value.message == message


def test_schedule_uses_two_chunk_shapes():
    assert T.schedule(1, 5) == [1]
    assert T.schedule(13, 5) == [1, 5, 5, 1, 1]
    assert sum(T.schedule(300, 5)) == 300 and set(T.schedule(300, 5)) == {1, 5}


def test_tiny_training_stream_yields_updates_and_stops():
    outputs = list(app.train_stream(*_train_args()))
    assert len(outputs) == 1 + len(T.schedule(TINY["episodes"], T.CHUNK))  # a status first, one per chunk
    status0 = outputs[0][0]
    assert "0 / 4 episodes" in status0
    status, err_fig, grad_fig, zero_fig, pq_fig, hist, slider = outputs[-1]
    assert "4 / 4 episodes" in status and "done" in status
    error = hist["metrics"]["tpo"]["error"]
    assert error.shape == (1, 4) and np.all((error >= 0) & (error <= 1))
    line = [t for t in err_fig.data if t.name == "tpo"][0]
    np.testing.assert_allclose(np.asarray(line.y), 100 * error[0], rtol=1e-6)
    # p before epoch 1 is p_old: the tracked group's first bars are a distribution over K = 4
    p_old = np.asarray(pq_fig.data[0].y)
    assert p_old.shape == (4,) and p_old.sum() == pytest.approx(1.0, abs=1e-5)
    # the stream is lazy and can be stopped (what the Stop button does): nothing runs after close()
    gen = app.train_stream(*_train_args())
    next(gen)
    gen.close()
    with pytest.raises(StopIteration):
        next(gen)


def test_episode_scrubber_redraws_the_tracked_group():
    *_, last = app.train_stream(*_train_args())
    hist = last[5]
    fig0 = app.show_episode(hist, 0)
    fig3 = app.show_episode(hist, 3)
    assert "episode 0" in fig0.layout.title.text and "episode 3" in fig3.layout.title.text
    q3 = [t for t in fig3.data if t.name.startswith("q")][0].y
    np.testing.assert_allclose(np.asarray(q3), hist["metrics"]["tpo"]["track_q"][0, 3, 0], rtol=1e-6)


# --------------------------------------------------------------------------------------------
# paper tab
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make_dir", [False, True])
def test_paper_tab_without_results_shows_the_papers_numbers_labelled(tmp_path, monkeypatch, make_dir):
    target = tmp_path / "results"
    if make_dir:
        target.mkdir()  # exists but holds no summary.json
    monkeypatch.setenv("TPO_RESULTS_DIR", str(target))
    md, figs, frame = app.paper_view()
    assert "No reproduced results yet" in md
    assert "The paper's published numbers" in md and "| TPO | 6.9 | 8.6 | 6.1 | 7.4 |" in md
    assert figs == [] and frame == ""


def test_log_axis_keeps_exact_zero_gradients_visible():
    """TPO's all-fail first-epoch gradient is exactly 0; a log axis would drop it, so it is drawn at a floor."""
    from tpo_core.lab import figures

    runs = {"tpo": np.array([[1.0, 1e-3, 0.0, 0.0]]), "grpo": np.array([[1.0, 0.9, 1.1, 1.0]])}
    fig = figures.curves_figure(runs, log_y=True, percent=False)
    tpo_line = next(t for t in fig.data if t.name == "tpo")
    assert np.all(np.asarray(tpo_line.y) > 0)  # nothing vanishes from the log plot
    assert np.asarray(tpo_line.y)[2] < 1e-3  # ... and zero is drawn below every real value
    assert list(tpo_line.customdata) == [1.0, 1e-3, 0.0, 0.0]  # the hover shows the true values
    assert "exact 0" in fig.layout.annotations[0].text
    linear = figures.curves_figure(runs, log_y=False, percent=False)
    assert list(next(t for t in linear.data if t.name == "tpo").y) == [1.0, 1e-3, 0.0, 0.0]


def test_gradient_plot_shows_the_step_beside_the_gradient():
    """Muon/AdamW normalise the gradient: the plot pairs ‖∇L‖ with ‖Δθ‖, same colour per method, step dashed."""
    from demos import training as T

    hist = {
        "task": "token reversal",
        "unit": "episode",
        "done": 3,
        "metrics": {
            "tpo": {"grad_norm": np.array([[0.5, 0.0, 1e-7]]), "step_norm": np.array([[0.3, 0.25, 0.24]])},
            "grpo": {"grad_norm": np.array([[1e-9, 1e-9, 0.4]]), "step_norm": np.array([[0.2, 0.2, 0.3]])},
        },
    }
    fig = T.grad_figure(hist)
    lines = {t.name: t for t in fig.data if t.name}
    assert set(lines) == {"TPO ‖∇L‖", "TPO ‖Δθ‖", "GRPO ‖∇L‖", "GRPO ‖Δθ‖"}
    assert lines["TPO ‖Δθ‖"].line.dash == "dash" and lines["TPO ‖∇L‖"].line.dash is None
    assert lines["TPO ‖∇L‖"].line.color == lines["TPO ‖Δθ‖"].line.color != lines["GRPO ‖∇L‖"].line.color
    assert list(lines["TPO ‖Δθ‖"].customdata) == [0.3, 0.25, 0.24]


# --------------------------------------------------------------------------------------------
# the default run, the task switch, no recompiles, a legible tracked-group plot
# --------------------------------------------------------------------------------------------
def test_task_switch_shows_the_controls_plots_and_explanation_of_that_task():
    token = app.on_task_change("token reversal")
    bandit = app.on_task_change("MNIST bandit")
    assert len(token) == len(bandit) == 11
    # reward, H, K, B, episodes; then MNIST steps; then the tracked-group plot and its episode slider
    assert [u["visible"] for u in token[1:9]] == [True] * 5 + [False, True, True]
    assert [u["visible"] for u in bandit[1:9]] == [False] * 5 + [True, False, False]
    assert token[9] == T.EXPLAIN["token reversal"] and bandit[9] == T.EXPLAIN["MNIST bandit"]
    assert token[10]["label"] == "zero-variance groups" and bandit[10]["label"] == "training error"
    assert {v for _, v in token[0]["choices"]} == set(tpo_core.TOKEN_METHODS)


def test_changing_eta_lr_or_seed_reuses_the_compiled_programs():
    """η and the seed are traced (so is lr): a new value at a compiled shape runs without a compile."""
    *_, first = app.train_stream(*_train_args(eta=1.0, seed=0))
    req = T.validate(**{**TINY, "eta": 0.37, "seed": 5})
    ((_, cfg),) = req.configs
    program = T.program_for(cfg)
    sizes = program.chunk._cache_size()
    assert sizes >= 1 and all(T.is_warm(cfg, 1, n) for n in set(T.schedule(TINY["episodes"], T.CHUNK)))
    *_, second = app.train_stream(*_train_args(eta=0.37, seed=5))
    assert program.chunk._cache_size() == sizes, "a new η / seed compiled the chunk again"
    lr_cfg = dataclasses.replace(cfg, lr=cfg.lr * 0.5)
    assert lr_cfg.static == cfg.static and T.program_for(lr_cfg).chunk is program.chunk
    # the runs did differ: another seed and η give other rollouts
    assert not np.allclose(first[5]["metrics"]["tpo"]["grad_norm"], second[5]["metrics"]["tpo"]["grad_norm"])


def test_tracked_group_plot_stacks_methods_with_separate_titles():
    """Two methods: one full-width row each; the row titles sit above their own row and do not overlap."""
    rng = np.random.default_rng(0)
    E, K = 4, 8

    def metrics():
        p = rng.dirichlet(np.ones(K), size=(1, 3, 2, E))
        return {
            "track_p": p,
            "track_q": rng.dirichlet(np.ones(K), size=(1, 3, 2)),
            "track_scores": rng.integers(0, 2, (1, 3, 2, K)).astype(float),
            "track_informative": np.ones((1, 3, 2), bool),
        }

    hist = {"done": 3, "metrics": {"tpo": metrics(), "grpo": metrics()}, "epochs": {"tpo": E, "grpo": E}}
    fig = T.pq_figure(hist, 1)
    titles = sorted(fig.layout.annotations, key=lambda a: -a.y)
    assert [a.text.split(":")[0] for a in titles] == ["TPO", "GRPO"]
    d1, d2 = fig.layout.yaxis.domain, fig.layout.yaxis2.domain
    assert d2[1] < d1[0], "the rows overlap"
    assert titles[1].y < d1[0] and titles[1].y >= d2[1], "GRPO's title is not between the two rows"
    assert titles[0].y >= d1[1] and fig.layout.margin.t >= 60
    assert all(len(a.text) < 70 for a in titles)
    assert fig.layout.xaxis.tickangle == 0 and fig.layout.xaxis.automargin
    q = [t for t in fig.data if t.name == "q (TPO target)"]
    assert len(q) == 2 and np.allclose(q[0].y, hist["metrics"]["tpo"]["track_q"][0, 1, 0])


@pytest.mark.slow
def test_default_run_shows_what_the_page_says(shared_mnist):
    """The page's text about the live plots (T.EXPLAIN["MNIST bandit"]) checked on a real default run: both
    methods learn; TPO's ‖∇L‖ peaks early and then falls; GRPO's climbs and stays near its peak, ending several
    times larger than TPO's; the two methods' steps ‖Δθ‖ stay of similar size."""
    d = T.DEFAULTS
    assert d["task"] == "MNIST bandit" and d["methods"] == ["tpo", "grpo"]
    *_, last = app.train_stream(*T.train_args())
    status, err_fig, grad_fig, *_, hist, _ = last
    assert "done" in status
    m = hist["metrics"]
    for name in ("tpo", "grpo"):
        err = m[name]["test_error"][0]
        assert err[-1] < 0.6 * err[0] and err[-1] < 0.15, (
            f"{name} did not learn: test error {err[0]:.3f} → {err[-1]:.3f}"
        )
    g_tpo, g_grpo = m["tpo"]["grad_norm"][0], m["grpo"]["grad_norm"][0]
    n = len(g_tpo)
    assert n == d["bandit_steps"] // T.BANDIT_EVAL_EVERY
    assert int(np.argmax(g_tpo)) < n // 3, f"TPO's ‖∇L‖ peaks late: block {int(np.argmax(g_tpo))} of {n}"
    assert g_tpo[-1] < 0.6 * g_tpo.max(), f"TPO's ‖∇L‖ did not fall: max {g_tpo.max():.3f}, last {g_tpo[-1]:.3f}"
    assert g_grpo[-1] > 0.8 * g_grpo.max() and g_grpo[-1] > 1.5 * g_grpo[0], (
        f"GRPO's ‖∇L‖ did not climb and stay: first {g_grpo[0]:.3f}, max {g_grpo.max():.3f}, last {g_grpo[-1]:.3f}"
    )
    assert g_grpo[-1] > 3 * g_tpo[-1], f"GRPO's ‖∇L‖ is not several times TPO's: {g_grpo[-1]:.3f} vs {g_tpo[-1]:.3f}"
    s_tpo, s_grpo = m["tpo"]["step_norm"][0], m["grpo"]["step_norm"][0]
    ratio = s_grpo / s_tpo
    assert np.all((ratio > 0.5) & (ratio < 2.0)), (
        f"the steps differ by more than 2×: ratios {ratio.min():.2f}–{ratio.max():.2f}"
    )
    assert {t.name for t in grad_fig.data if t.name} == {"TPO ‖∇L‖", "TPO ‖Δθ‖", "GRPO ‖∇L‖", "GRPO ‖Δθ‖"}


def test_stop_status_says_where_the_run_stopped():
    *_, last = app.train_stream(*_train_args())
    hist = dict(last[5], done=2)
    msg = app.stopped_status(hist)
    assert msg.startswith("**stopped** at 2 / 4 episodes") and "error" not in msg.lower()
    assert "stopped** before the first update" in app.stopped_status(None)
    bandit = {"task": "MNIST bandit", "unit": "step", "done": 7, "total": 30}
    assert "stopped** at 700 / 3000 steps" in app.stopped_status(bandit)


def test_stop_ends_the_running_generator_at_its_next_chunk_with_a_stopped_status():
    import asyncio

    class Request:
        session_hash = "session-a"

    gen = app.train_stream(*_train_args(episodes=40), request=Request())
    first = next(gen)
    assert app.request_stop("session-b") is False  # another session has nothing running
    status, run_id = app.stop_run(first[5], request=Request())
    assert status.startswith("**stopping** after the current chunk"), status  # not "stopped": the chunk still runs
    rest = list(gen)  # one more update, then the generator ends
    assert len(rest) == 1 and rest[0][0].startswith("**stopped** at"), [r[0] for r in rest]
    assert rest[0][5]["done"] < rest[0][5]["total"]
    # Stop's follow-up event writes the status the run ended with, so "stopping" cannot be the last word
    assert asyncio.run(app.await_stopped(run_id, Request())) == rest[0][0]
    assert app.request_stop("session-a") is False  # nothing left running in that session
    assert app.stop_run(rest[0][5], request=Request()) == (gr.update(), None)  # nothing running: status kept
    assert asyncio.run(app.await_stopped(None)) == gr.update()
    *_, last = app.train_stream(*_train_args(), request=Request())  # the next run is not stopped by the old request
    assert "stopped" not in last[0]


def test_stop_just_as_the_run_finishes_ends_on_the_runs_own_status():
    """Stop pressed after the last chunk's check: the run ends "done", and the follow-up says so, not "stopping"."""
    import asyncio

    class Request:
        session_hash = "session-c"

    gen = app.train_stream(*_train_args(), request=Request())
    outs = [next(gen)]
    for out in gen:
        outs.append(out)
        if out[5]["done"] == out[5]["total"]:
            break
    status, run_id = app.stop_run(outs[-1][5], request=Request())  # flagged after the last check
    assert status.startswith("**stopping**") and run_id is not None
    assert list(gen) == []  # the generator ends without another update
    assert asyncio.run(app.await_stopped(run_id, Request())) == outs[-1][0] and "done" in outs[-1][0]


def test_stop_follow_up_waits_for_the_run_and_yields_to_a_newer_one():
    """await_stopped wakes when the run ends (not before), and writes nothing once the session has started a
    newer run (Train pressed right after Stop), whose own updates must not be overwritten."""
    import asyncio

    class Request:
        session_hash = "session-d"

    async def scenario():
        gen = app.train_stream(*_train_args(episodes=40), request=Request())
        first = await asyncio.to_thread(next, gen)
        _, run_id = app.stop_run(first[5], request=Request())
        waiting = asyncio.ensure_future(app.await_stopped(run_id, Request()))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # the run has not reached its next chunk's check
        rest = await asyncio.to_thread(list, gen)
        assert await asyncio.wait_for(waiting, 10) == rest[-1][0]
        # Stop, then a newer run in the same session before the follow-up looks: the follow-up keeps quiet
        gen = app.train_stream(*_train_args(episodes=40), request=Request())
        first = await asyncio.to_thread(next, gen)
        _, run_id = app.stop_run(first[5], request=Request())
        await asyncio.to_thread(list, gen)
        newer = app.train_stream(*_train_args(), request=Request())
        await asyncio.to_thread(next, newer)
        assert await app.await_stopped(run_id, Request()) == gr.update()
        await asyncio.to_thread(list, newer)

    asyncio.run(scenario())


def test_the_latest_run_table_keeps_only_the_newest_sessions(monkeypatch):
    """The board's latest-run table (session -> latest run id) is bounded: past ``latest_keep`` sessions the oldest
    is dropped, and a session that trains again becomes the newest."""
    from demos.stop import StopBoard

    monkeypatch.setattr(app, "STOPS", StopBoard(latest_keep=2))

    def run(name):
        class Request:
            session_hash = name

        for _ in app.train_stream(*_train_args(episodes=1), request=Request()):
            pass

    for name in ("s1", "s2", "s1", "s3"):
        run(name)
    assert list(app.STOPS.latest) == ["s1", "s3"]  # s2 was the oldest when s3 came
    assert app.STOPS.latest["s1"] < app.STOPS.latest["s3"]  # run ids grow


def test_train_inputs_are_the_train_callbacks_parameters_in_order():
    """TRAIN_INPUTS (what train_args orders the defaults by) names app.train_stream's parameters, in order."""
    import inspect

    params = [p for p in inspect.signature(app.train_stream).parameters if p != "request"]
    assert list(T.TRAIN_INPUTS) == params
    assert list(inspect.signature(T.validate).parameters) == params
    args = T.train_args(eta=0.5)
    assert args[params.index("eta")] == 0.5 and args[params.index("task")] == T.DEFAULTS["task"]
    with pytest.raises(ValueError, match="etaa"):
        T.train_args(etaa=0.5)
