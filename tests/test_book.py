"""The built book (quick mode), then every page of it in headless Chromium.

The build: zero warnings, every page, offline plotly.js and MathJax, Colab links. The first test of the session
builds the book with ``python -m book.build`` unless ``_build/`` already holds a fresh successful build (see
tests/book_helpers.py).

The reader's pass (``browser`` tests), offline, over that same build: every plotly figure drew its SVG, MathJax
typeset the math, no executed cell shows a traceback or an error, and the page asked no outside host for anything.
Screenshots go to ``_build/screenshots/book/`` (one above-the-fold and one full-page shot per page).

One module, so that pytest-xdist's ``--dist loadfile`` runs the build and the pass on one worker, the build first
(tests/schedule.py).
"""

from __future__ import annotations

import functools
import http.server
import pathlib
import re
import threading
import urllib.parse

import plotly
import pytest
import yaml

from tests import book_helpers

# the first test to ask for the book builds it; the browser pass must allow for that too when run alone (-m browser)
pytestmark = pytest.mark.timeout(book_helpers.BUILD_TIMEOUT_S + 600)

ROOT = book_helpers.ROOT
HTML = book_helpers.HTML
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
CDN = re.compile(r"""<(?:script|link)[^>]+(?:src|href)=["'](?:https?:)?//[^"']*(?:plotly|mathjax)[^"']*["']""", re.I)
COLAB = re.compile(r'href="(https://colab\.research\.google\.com/github/[^"]+)"')


@pytest.fixture(scope="module")
def built():
    return book_helpers.ensure_built()


def _page(doc: str) -> str:
    return (HTML / f"{doc}.html").read_text(encoding="utf-8")


def test_build_succeeded_with_zero_warnings(built):
    assert built["ok"] and built["returncode"] == 0, built["problems"]
    assert built["warnings"] == []
    assert built["full"] and built["docs"] == book_helpers.toc_docs()
    print(f"book built in {built['seconds']} s (TPO_QUICK={built['quick']})")


def test_every_toc_page_was_built(built):
    for doc in book_helpers.toc_docs():
        assert (ROOT / f"{doc}.md").exists(), f"{doc}.md is in _toc.yml but missing"
        assert (HTML / f"{doc}.html").exists(), f"{doc}.html missing from the build"
    assert (HTML / "index.html").exists()


def test_plotly_js_is_shipped_once_per_page_and_nothing_from_a_cdn(built):
    shipped = HTML / "_static" / "plotly.min.js"
    installed = pathlib.Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    assert shipped.read_bytes() == installed.read_bytes()
    assert (HTML / "_static" / "tex-svg.js").stat().st_size > 1_000_000
    for doc in book_helpers.toc_docs():
        html = _page(doc)
        assert not CDN.search(html), f"{doc}: {CDN.search(html).group(0)}"
        assert len(re.findall(r'<script[^>]+src="[^"]*_static/plotly\.min\.js', html)) == 1, doc
        if 'class="math' in html:
            assert re.search(r'<script[^>]+src="[^"]*_static/tex-svg\.js', html), f"{doc}: math without MathJax"


def test_every_chapter_has_a_figure_and_no_error_output(built):
    for doc in book_helpers.toc_docs():
        html = _page(doc)
        assert "Traceback (most recent call last)" not in html, doc
        assert not re.search(r'class="output (?:traceback|error)', html), doc
    for doc in book_helpers.chapter_docs():
        html = _page(doc)
        assert "Plotly.newPlot" in html, f"{doc}: no plotly figure rendered"
        assert "application/vnd.plotly" not in html, f"{doc}: a figure fell back to plotly's JSON mimetype"


def test_colab_buttons_open_the_committed_notebooks_on_main(built):
    url = CONFIG["repository"]["url"].rstrip("/")
    org_repo = url.split("github.com/")[1]
    for doc in [d for d in book_helpers.toc_docs() if d in book_helpers.chapter_docs() or d.endswith("reproduction")]:
        links = set(COLAB.findall(_page(doc)))
        assert links == {f"https://colab.research.google.com/github/{org_repo}/blob/main/{doc}.ipynb"}, (doc, links)
        assert (ROOT / f"{doc}.ipynb").exists(), f"{doc}.ipynb is linked but not committed"
    assert f'href="{url}"' in _page("book/intro"), "repository button missing"


MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|tmp|root|home|Users|mnt)/[\w.-]+")


def _outputs(page: str) -> list[str]:
    """The HTML of every executed cell's output area of a page."""
    return [chunk.split('class="cell docutils', 1)[0] for chunk in page.split('class="cell_output')[1:]]


@pytest.mark.parametrize("doc", book_helpers.toc_docs())
def test_no_page_mentions_a_file_outside_the_repository_a_machine_path_or_not_found(built, doc):
    page = _page(doc)
    text = re.sub(r"<[^>]+>", " ", page)
    assert "PAPER.md" not in page, f"{doc} mentions PAPER.md (cite the paper by section instead)"
    assert not MACHINE_PATH.search(text), f"{doc} shows a machine path: {MACHINE_PATH.search(text).group(0)}"
    for out in _outputs(page):
        assert "not found" not in re.sub(r"<[^>]+>", " ", out).lower(), f"{doc} prints 'not found' in an output"


def test_every_chapter_was_executed_by_the_parallel_build(built):
    """The build ran its pages ``jobs`` at a time (book/jb_parallel.py) and myst-nb executed every chapter."""
    from book import build

    assert built["jobs"] == build.default_jobs()
    missing = [d for d in book_helpers.chapter_docs() if d not in built["executed_s"]]
    assert not missing, f"not executed: {missing}"
    slowest = sorted(built["executed_s"].items(), key=lambda kv: -kv[1])[:6]
    print("slowest pages: " + ", ".join(f"{d} {s:.0f} s" for d, s in slowest))


# -- the reader's pass, in Chromium, over the same build --------------------------------------------------------
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


@pytest.mark.browser
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
