"""The running server: `python -m demos.app --port <free>` as a subprocess, driven through gradio_client."""

import base64
import json
import urllib.request

import jax.numpy as jnp
import numpy as np
import pytest

import tpo_core
from demos.server_process import running_server

TINY_TRAIN = ("token reversal", ["tpo"], "terminal", 3, 8, 4, 1.0, 4, 1, 0, 1000)  # same config as the callbacks test


@pytest.fixture(scope="module")
def server():
    """`python -m demos.app --port <free>` in a subprocess; terminated (then killed) at the end."""
    with running_server(warm=False) as srv:
        yield srv.url
    assert srv.proc.poll() is not None


@pytest.fixture(scope="module")
def client(server):
    from gradio_client import Client

    return Client(server, verbose=False)


def _values(y):
    """A plotly array: a list, or plotly >= 6's typed array {"dtype", "bdata" (base64)}."""
    if isinstance(y, dict):
        return np.frombuffer(base64.b64decode(y["bdata"]), dtype=np.dtype(y["dtype"])).tolist()
    return list(y)


def _plot(payload):
    """{trace name: trace} of a gr.Plot value as the API returns it, with y decoded."""
    assert payload["type"] == "plotly"
    fig = json.loads(payload["plot"])
    return {t.get("name"): dict(t, y=_values(t.get("y", []))) for t in fig["data"]}


def test_server_binds_loopback_only_and_shows_the_app(server):
    assert server.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(server, timeout=10) as r:
        html = r.read().decode()
    assert "TPO, interactively" in html


def test_explore_endpoint(client):
    scores, logp = "1, 0, 0, 0.5", "-1, -2, -3, -4"
    out = client.predict(4, 0.5, "custom", scores, "custom", logp, 0, api_name="/explore")
    s_txt, l_txt, message, summary, bars, contrast = out
    assert message == "" and s_txt == "1, 0, 0, 0.5"
    traces = _plot(bars)
    q_ref = tpo_core.tpo_target(jnp.asarray([-1.0, -2, -3, -4]), jnp.asarray([1.0, 0, 0, 0.5]), 0.5)
    np.testing.assert_allclose(traces["q"]["y"], np.asarray(q_ref), atol=1e-6)
    assert set(traces) == {"p_old", "q", "u", "p − q"}
    assert "q beats every perturbed alternative" in summary
    assert set(_plot(contrast)) == {"TPO  q − p_old", "GRPO  A"}


def test_explore_endpoint_reports_bad_input(client):
    out = client.predict(4, 1.0, "custom", "1, 0, two, 0", "uniform", "", 0, api_name="/explore")
    assert "scores: entry 3 ('two') is not a number" in out[2]
    out = client.predict(4, 1.0, "custom", "1, 0", "uniform", "", 0, api_name="/explore")
    assert "scores: got 2 numbers but K = 4" in out[2]


def test_train_endpoint_streams_and_finishes(client):
    job = client.submit(*TINY_TRAIN, api_name="/train")
    updates = [o[0] for o in job]
    assert job.status().success
    assert "0 / 4 episodes" in updates[0]
    assert "4 / 4 episodes" in updates[-1] and "done" in updates[-1]
    last = job.outputs()[-1]
    err = _plot(last[1])["tpo"]["y"]
    assert len(err) == 4 and all(0 <= v <= 100 for v in err)
    assert "q (TPO target)" in _plot(last[4])


def test_train_endpoint_rejects_bad_input_with_a_message(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="at least one method"):
        client.predict("token reversal", [], "terminal", 3, 8, 4, 1.0, 4, 1, 0, 1000, api_name="/train")
    with pytest.raises(AppError, match="episodes"):
        client.predict("token reversal", ["tpo"], "terminal", 3, 8, 4, 1.0, 5000, 1, 0, 1000, api_name="/train")
    with pytest.raises(AppError, match="greater than maximum value 10"):  # H: Gradio's own slider bound
        client.predict("token reversal", ["tpo"], "terminal", 11, 8, 4, 1.0, 4, 1, 0, 1000, api_name="/train")
