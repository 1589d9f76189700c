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
# time is XLA compilation. Measured on the presets' smoke TPO program (2026-12-01, 2-core CPU, idle): 17.7 s to
# compile with XLA's defaults, 11.2 s with LLVM at O0, 5.1-5.3 s with O0 and the classic (non-MLIR) CPU fusion
# emitters; the run stays ~10 ms per episode. The book build (a subprocess, tests/book_helpers.py) removes these
# flags: its cells time real runs, and at the book's model size neither flag compiles faster (22 s default,
# 23 s without the new emitters, and their programs ran 1.5x slower).
FAST_COMPILE = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")
if os.environ.get("TPO_TEST_XLA_OPT") != "default":
    _flags = os.environ.get("XLA_FLAGS", "").split()
    os.environ["XLA_FLAGS"] = " ".join(_flags + [f for f in FAST_COMPILE if f not in _flags])

# One compile-cache policy: a persistent JAX cache private to this test session (tests/run_suite.py makes one
# for all files), on in the pytest processes and in the servers, CLIs and kernels they start.
if "TPO_JAX_CACHE" not in os.environ:
    import tempfile

    os.environ["TPO_JAX_CACHE"] = tempfile.mkdtemp(prefix="tpo-jax-cache-")

from tpo_core import runtime  # noqa: E402

runtime.enable_compile_cache()


@pytest.fixture(autouse=True)
def _stay_below_the_memory_map_limit():
    """Free compiled programs between tests once the process holds half of vm.max_map_count (every XLA CPU
    program holds ~1k memory maps; a long pytest process otherwise crashes in a later compile)."""
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


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="session")
def chromium_path():
    """Path of the system Chromium. Missing: a failure under CI=true, a skip on a developer machine."""
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if path is None:
        _missing("Chromium at /usr/bin/chromium", "apt-get install -y chromium; CI installs it")
    return path


@pytest.fixture(scope="session")
def browser(chromium_path):
    """A headless Playwright Chromium (the system one; never `playwright install`)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield b
        b.close()


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


@pytest.fixture(scope="session")
def artifacts_dir():
    """Where browser tests save screenshots (ignored by git)."""
    d = ROOT / "artifacts"
    d.mkdir(exist_ok=True)
    return d
