"""The built book (quick mode): zero warnings, every page, offline plotly.js and MathJax, Colab links.

The first test of the session builds the book with ``python -m book.build`` unless ``_build/``
already holds a fresh successful build (see tests/book_helpers.py); the browser test shares it.
"""
from __future__ import annotations

import pathlib
import re

import plotly
import pytest
import yaml

from tests import book_helpers

pytestmark = pytest.mark.timeout(book_helpers.BUILD_TIMEOUT_S + 300)

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
