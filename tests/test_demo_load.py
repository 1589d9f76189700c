"""benchmarks/demo_load.py: the demo under concurrent training sessions (a reduced run) and its committed results
(their rendering: tests/test_benchmarks_report.py)."""

import collections
import json
import pathlib

import numpy as np
import pytest

from benchmarks import demo_load as DL

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "demo_load.json"


def _pq_payload(names, p_old, q):
    """A gr.Plot value as the API returns it, holding the tracked-group bars the demo draws."""
    import plotly.graph_objects as go

    fig = go.Figure(
        [
            go.Bar(x=names, y=np.asarray(p_old, np.float32), name="p_old (epoch 1)"),
            go.Bar(x=names, y=np.asarray(q, np.float32), name="q (TPO target)"),
        ]
    )
    return {"type": "plotly", "plot": fig.to_json()}


def test_closed_form_q_check_agrees_with_the_engine_and_tells_eta_apart():
    import jax.numpy as jnp

    import tpo_core

    logp = np.log(np.array([0.1, 0.4, 0.3, 0.2]))
    scores = np.array([1.0, 0.0, 1.0, 0.0])
    q = np.asarray(tpo_core.tpo_target(jnp.asarray(logp), jnp.asarray(scores), 0.7))
    names = ["y1✓", "y2", "y3✓", "y4"]
    payload = _pq_payload(names, np.exp(logp), q)
    err, k = DL.tracked_q_check(payload, 0.7)
    assert k == 4 and err < 1e-6
    err_other, _ = DL.tracked_q_check(payload, 0.75)  # the next η on the slider's grid
    assert err_other > 100 * DL.Q_ATOL
    assert DL.tracked_q_check(_pq_payload(["y1", "y2", "y3", "y4"], np.exp(logp), np.exp(logp)), 0.7) is None


def test_bad_arguments_exit_2_with_one_line(capsys):
    for argv in (
        ["--sessions", "0"],
        ["--trainings", "x"],
        ["--threshold-mb", "-1"],
        ["--bogus"],
        ["--trainings", "5", "--sample-every", "10"],
    ):
        assert DL.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("demo_load: error:"), err


@pytest.mark.slow
def test_reduced_load_run_has_no_errors_no_cross_talk_a_bounded_queue_and_no_memory_growth():
    from demos import app

    args = DL.parse_args(
        ["--sessions", "6", "--trainings", "12", "--sample-every", "6", "--episodes", "4", "--no-warm"]
    )
    r = DL.run(args, log=lambda *a: None)
    sessions, trainings = r["per_session"], r["per_training"]
    assert len(sessions) == 6 and len(trainings) == 12
    assert [x["error"] for x in sessions + trainings if not x["ok"]] == []
    # each session's plots its own: every run of one (seed, η), in 6 concurrent sessions and then in 12 new ones,
    # streamed the same plot data, and the 6 (seed, η) streamed 6 different data
    sigs = collections.defaultdict(set)
    for x in sessions:
        sigs[x["session"]].add(x["signature"])
    for x in trainings:
        sigs[x["config"]].add(x["signature"])
    assert sorted(sigs) == list(range(6)) and all(len(s) == 1 for s in sigs.values())
    assert len({next(iter(s)) for s in sigs.values()}) == 6
    assert len({(x["seed"], x["eta"]) for x in sessions}) == 6
    # and the tracked group's q is TPO's closed form at the session's own η wherever the group is informative
    checked = [x for x in sessions + trainings if x["q_error"] is not None]
    assert checked and max(x["q_error"] for x in checked) < 1e-4
    # the queue: full at QUEUE_MAX_SIZE waiting runs, every further submission refused cleanly, then recovered
    q = r["queue"]
    assert q["blockers_running"] and q["queue_size_when_full"] == app.QUEUE_MAX_SIZE
    assert q["peak_queue_size"] <= app.QUEUE_MAX_SIZE
    assert q["refused"] == q["extra_submitted"] > 0 and q["not_refused"] == [] and "full" in q["refusal_message"]
    assert q["queue_size_after_cancel"] == 0 and q["fresh_run_after"] == "ok"
    # memory: the 6 trainings after the first 6 add less than the threshold to the idle server's RSS
    samples = {s["trainings"]: s["rss_mb"] for s in r["memory"]["samples"]}
    assert sorted(samples) == [0, 6, 12]
    assert samples[12] - samples[6] < args.threshold_mb
    assert r["server_alive_at_end"] and r["server_tracebacks"] == 0


def test_committed_results_have_the_fields_and_pass():
    if not RESULTS.is_file():
        pytest.fail(f"{RESULTS.relative_to(ROOT)} is missing: run python benchmarks/demo_load.py")
    r = json.loads(RESULTS.read_text())
    assert r["config"]["sessions"] == len(r["per_session"]) >= 20
    assert r["config"]["trainings"] == len(r["per_training"]) >= 100
    assert len(r["machine"]["loadavg_start"]) == 3 and "shared" in r["machine"]["note"]
    for part in ("sessions", "trainings"):
        assert r[part]["errors"] == 0
        assert set(r[part]["latency_s"]) >= {"p50", "p90", "p99"} and set(r[part]["first_update_s"]) >= {"p50", "p90"}
    m = r["memory"]
    assert {"rss_before_mb", "rss_after_first_block_mb", "rss_after_all_mb", "threshold_mb", "verdict"} <= set(m)
    assert m["rss_after_all_mb"] - m["rss_after_first_block_mb"] == pytest.approx(m["growth_after_first_block_mb"])
    assert m["growth_after_first_block_mb"] < m["threshold_mb"] and m["ok"]
    assert r["own_data"]["ok"] and r["own_data"]["q_checked_runs"] > 0
    assert r["queue"]["ok"] and r["queue"]["refused"] == r["queue"]["extra_submitted"]
    assert r["ok"]


def test_app_keeps_at_most_max_sessions_of_session_state(monkeypatch, free_port):
    """The bound benchmarks/demo_load.py motivated: Gradio keeps every session's state (10,000 by default);
    the app drops the least recently used past --max-sessions. Seven sessions through the real server,
    capacity 3: three states remain, the latest three."""
    import gradio as gr
    from gradio_client import Client

    from demos import app

    assert app.parse_args([]).max_sessions == app.STATE_SESSION_CAPACITY
    monkeypatch.setenv("TPO_DEMO_MAX_SESSIONS", "5")
    assert app.parse_args([]).max_sessions == 5
    with pytest.raises(SystemExit) as e:
        app.parse_args(["--max-sessions", "0"])
    assert e.value.code == 2
    seen = {}
    launch = gr.Blocks.launch

    def launch_in_background(self, **kw):
        seen.update(kw, demo=self)
        return launch(self, **{**kw, "prevent_thread_lock": True})

    monkeypatch.setattr(gr.Blocks, "launch", launch_in_background)
    app.main(["--port", str(free_port), "--no-warm", "--max-sessions", "3"])
    demo = seen["demo"]
    try:
        assert seen["state_session_capacity"] == 3 and seen["server_name"] == "127.0.0.1"
        hashes = []
        for i in range(7):
            client = Client(f"http://127.0.0.1:{free_port}/", verbose=False)
            out = client.predict(4, 1.0, "custom", "1, 0, 0, 0", "uniform", "", i, api_name="/explore")
            assert out[2] == ""
            hashes.append(client.session_hash)
            client.close()
        assert list(demo.state_holder.session_data) == hashes[-3:]
    finally:
        demo.close()
