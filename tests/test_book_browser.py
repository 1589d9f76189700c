"""Open every page of the built book in headless Chromium, offline, as a reader would.

Checks per page: every plotly figure drew its SVG, MathJax typeset the math, no executed cell shows
a traceback or an error, and the page asked no outside host for anything. Screenshots go to
``_build/screenshots/book/`` (one above-the-fold and one full-page shot per page). The book is built first if needed (tests/book_helpers.py).
"""
from __future__ import annotations

import functools
import http.server
import pathlib
import threading
import urllib.parse

import pytest

from tests import book_helpers

pytestmark = [pytest.mark.browser, pytest.mark.timeout(book_helpers.BUILD_TIMEOUT_S + 600)]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output readable
        pass


@pytest.fixture(scope="module")
def site(free_port_module):
    book_helpers.ensure_built()
    handler = functools.partial(_QuietHandler, directory=str(book_helpers.HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port_module), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{free_port_module}"
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture(scope="module")
def free_port_module():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def shots(screenshots_dir):
    d = screenshots_dir / "book"
    d.mkdir(parents=True, exist_ok=True)
    return d


PAGE_STATE = """() => {
  const figs = document.querySelectorAll('div.plotly-graph-div');
  const drawn = [...figs].filter(f => f.classList.contains('js-plotly-plot') && f.querySelector('.main-svg'));
  return {
    figures: figs.length,
    drawn: drawn.length,
    math: document.querySelectorAll('.math').length,
    mathjax: document.querySelectorAll('mjx-container').length,
    mathErrors: document.querySelectorAll('mjx-merror, [data-mjx-error]').length,
    tracebacks: document.querySelectorAll('.cell_output .output.traceback, .cell_output .output.error').length,
    tracebackText: [...document.querySelectorAll('.cell_output')].some(o => o.innerText.includes('Traceback (most recent call last)')),
    colab: [...document.querySelectorAll('a[href*="colab.research.google.com"]')].map(a => a.href),
  };
}"""

WAIT_RENDERED = """() => {
  const figs = document.querySelectorAll('div.plotly-graph-div');
  const drawn = [...figs].filter(f => f.querySelector('.main-svg')).length;
  const mathPending = document.querySelectorAll('.math').length > 0 &&
      !(window.MathJax && window.MathJax.startup && window.MathJax.startup.document &&
        document.querySelectorAll('mjx-container').length > 0);
  return drawn === figs.length && !mathPending;
}"""


@pytest.mark.parametrize("doc", book_helpers.toc_docs())
def test_page_renders_offline(browser, site, shots, doc):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    outside, failed, js_errors = [], [], []

    def route(r):
        host = urllib.parse.urlparse(r.request.url).hostname
        if host in ("127.0.0.1", None) or r.request.url.startswith(("data:", "blob:")):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.on("requestfailed", lambda req: failed.append(req.url) if "127.0.0.1" in req.url else None)
    page.on("pageerror", lambda exc: js_errors.append(str(exc)))
    try:
        page.goto(f"{site}/{doc}.html", wait_until="load", timeout=60_000)
        page.wait_for_function(WAIT_RENDERED, timeout=60_000)
        state = page.evaluate(PAGE_STATE)
        name = pathlib.PurePath(doc).name
        page.screenshot(path=str(shots / f"{name}.png"), full_page=False)
        page.screenshot(path=str(shots / f"{name}_full.png"), full_page=True)
    finally:
        page.close()

    assert state["drawn"] == state["figures"], f"{doc}: {state['figures'] - state['drawn']} plotly figure(s) not drawn"
    if doc in book_helpers.chapter_docs():
        assert state["figures"] >= 1, f"{doc}: no plotly figure"
    if state["math"]:
        assert state["mathjax"] >= state["math"], f"{doc}: {state['math']} math nodes, {state['mathjax']} typeset"
    assert state["mathErrors"] == 0, f"{doc}: MathJax reported {state['mathErrors']} error(s)"
    assert state["tracebacks"] == 0 and not state["tracebackText"], f"{doc}: an executed cell shows an error"
    assert not failed, f"{doc}: local requests failed: {failed}"
    assert not [u for u in outside if "plotly" in u or "mathjax" in u], f"{doc}: fetched from a CDN: {outside}"
    # the one known harmless console error of every Jupyter Book v1 page (TOOLCHAIN.md)
    real_errors = [e for e in js_errors if "THEBE_JS_URL" not in e]
    assert not real_errors, f"{doc}: JavaScript errors: {real_errors}"
