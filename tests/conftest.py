"""Shared fixtures: data location, Chromium for browser tests, a free loopback port."""
import os
import pathlib
import shutil
import socket

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_MNIST = ROOT.parent / "shared" / "data" / "mnist"
if "TPO_DATA_DIR" not in os.environ and SHARED_MNIST.is_dir():
    os.environ["TPO_DATA_DIR"] = str(SHARED_MNIST)
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
# A persistent JAX compile cache private to this test session (shared with the servers and CLIs the tests
# start), so no other process on the machine writes into the cache the tests read.
if "TPO_JAX_CACHE" not in os.environ:
    import tempfile

    os.environ["TPO_JAX_CACHE"] = tempfile.mkdtemp(prefix="tpo-jax-cache-")

# The pytest process itself never turns the persistent cache on (a precaution: the aborts once blamed on it
# were the memory-map limit, see tpo_core.train.release_compiled). The servers, CLIs and notebook kernels the
# tests start still use the session cache above from their first compile.
import tpo_core.train as _train  # noqa: E402

import tpo_core  # noqa: E402
import tpo_core.notebook as _notebook  # noqa: E402

_train.enable_compile_cache = tpo_core.enable_compile_cache = _notebook.enable_compile_cache = lambda path=None: None


@pytest.fixture(autouse=True)
def _stay_below_the_memory_map_limit():
    """Free compiled programs between tests once the process holds half of vm.max_map_count (every XLA CPU
    program holds ~1k memory maps; a long pytest process otherwise crashes in a later compile)."""
    yield
    _train.release_compiled()


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="session")
def chromium_path():
    """Path of the system Chromium. Missing: a failure under CI=true, a skip on a developer machine."""
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Chromium not found at /usr/bin/chromium (CI installs it with apt-get install chromium)")
        pytest.skip("Chromium not installed (apt-get install -y chromium)")
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
def artifacts_dir():
    """Where browser tests save screenshots (ignored by git)."""
    d = ROOT / "artifacts"
    d.mkdir(exist_ok=True)
    return d
