"""Shared fixtures: data location, Chromium for browser tests, a free loopback port."""

import os
import pathlib
import shutil
import socket

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_MNIST = ROOT.parent / "shared" / "data" / "mnist"
SHARED_REFERENCE = ROOT.parent / "shared" / "reference" / "token_reversal_sparse_reward_results.npz"
if not os.environ.get("TPO_DATA_DIR") and SHARED_MNIST.is_dir():
    os.environ["TPO_DATA_DIR"] = str(SHARED_MNIST)
if not os.environ.get("TPO_REFERENCE_NPZ") and SHARED_REFERENCE.is_file():  # the book build reads it too
    os.environ["TPO_REFERENCE_NPZ"] = str(SHARED_REFERENCE)
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

# Fast compiles, set once here before jax is imported: the tests train tiny models for a few episodes, so their
# time is XLA compilation, not the runs. LLVM at -O0 and the classic (non-MLIR) CPU fusion emitters shorten each
# compile, and at these model sizes the programs still run in milliseconds per episode; TPO_TEST_XLA_OPT=default
# keeps XLA's defaults (to compare, or to test the default compiler). The book build (a subprocess,
# tests/book_helpers.py) removes both flags: its cells time real runs at the book's model size, where the
# programs must run as fast as XLA makes them and where the flags do not make the compiles shorter.
FAST_COMPILE = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")
if os.environ.get("TPO_TEST_XLA_OPT") != "default":
    _flags = os.environ.get("XLA_FLAGS", "").split()
    os.environ["XLA_FLAGS"] = " ".join(_flags + [f for f in FAST_COMPILE if f not in _flags])

# One compile-cache policy: a persistent JAX cache private to this test session, on in the pytest processes and
# in the servers, CLIs and kernels they start. The first process of the session (pytest-xdist's controller, or a
# plain pytest) makes it before any worker starts; the workers inherit it through the environment, so a program
# one file compiled loads in every later file; the process that made it removes it at the end.
_OWN_CACHE = None
if "TPO_JAX_CACHE" not in os.environ:
    import tempfile

    _OWN_CACHE = os.environ["TPO_JAX_CACHE"] = tempfile.mkdtemp(prefix="tpo-jax-cache-")

from tests import fresh_venv  # noqa: E402
from tpo_core import runtime  # noqa: E402

runtime.enable_compile_cache()

pytest_plugins = ("tests.schedule",)  # the xdist schedule of `make test` (tests/schedule.py)


def pytest_sessionstart(session):
    """The packaging tests' venvs (tests/fresh_venv.py) start building at once, in the background: their time is
    spent waiting on the package index, beside the rest of the suite instead of after it."""
    fresh_venv.start_preparing(session.config)


def pytest_unconfigure(config):
    fresh_venv.stop_preparing()
    if _OWN_CACHE and not os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


@pytest.fixture(autouse=True)
def _stay_below_the_memory_map_limit():
    """Free compiled programs between tests once the process holds half of vm.max_map_count (every XLA CPU
    program holds memory maps of its own; a long pytest process otherwise crashes in a later compile)."""
    yield
    runtime.release_compiled()


def _missing(what: str, how: str):
    """Data or tools this repository does not ship: a failure under CI=true, a skip elsewhere."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} not found ({how})")
    pytest.skip(f"{what} not found ({how})")


@pytest.fixture(scope="session")
def shared_mnist():
    """The real MNIST test set (../shared/data/mnist beside the repository, or $TPO_DATA_DIR)."""
    d = pathlib.Path(os.environ.get("TPO_DATA_DIR") or SHARED_MNIST)
    if not (d / "t10k-labels-idx1-ubyte.gz").exists():
        _missing("the real MNIST test set", "../shared/data/mnist or $TPO_DATA_DIR; this repository does not ship it")
    return d


@pytest.fixture(scope="session")
def reference_npz():
    """The reference implementation's Table-3 curves (../shared/reference or $TPO_REFERENCE_NPZ)."""
    p = pathlib.Path(os.environ.get("TPO_REFERENCE_NPZ") or SHARED_REFERENCE)
    if not p.is_file():
        _missing("the reference curves", "../shared/reference or $TPO_REFERENCE_NPZ; downloaded when online")
    return p


CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def chromium_path():
    """Path of the system Chromium. Missing: a failure under CI=true, a skip on a developer machine."""
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if path is None:
        _missing("Chromium at /usr/bin/chromium", "apt-get install -y chromium; CI installs it")
    return path


@pytest.fixture(scope="module")
def browser(chromium_path):
    """A headless Playwright Chromium (the system one; never `playwright install`), one per test module.

    Not session-scoped: Playwright's sync API keeps an asyncio event loop running in the main thread for as long as
    it is open, and a test that later calls `asyncio.run` in the same worker (tests/test_demo_callbacks.py) then
    fails with "cannot be called from a running event loop"; closing it with its module ends that loop."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield b
        b.close()


def open_page(browser, width: int, height: int):
    """(context, page, errors): a new browser context and page of that viewport, with every uncaught JavaScript
    error of the page collected in ``errors``."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    errors: list = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    return context, page, errors


@pytest.fixture
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def screenshots_dir():
    """Where browser tests save screenshots for people to look at: _build/screenshots/ (ignored by git)."""
    d = ROOT / "_build" / "screenshots"
    d.mkdir(parents=True, exist_ok=True)
    return d
