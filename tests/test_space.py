"""The demo as a Hugging Face Space (space/, `python -m space.assemble`, .github/workflows/space.yml).

Fast: the assembled folder's Space card (its YAML front matter as Spaces reads it), its requirements (tpo_core and
the demo's pinned dependencies, no PyTorch or book stack), the copied demo, the command line's refusals, and that
the README, the book's intro, the Space card and the workflow name the same Space and book as _config.yml.

Slow, in Chromium: the Space as Spaces runs it. Assemble into a fresh folder with tpo_core from this clone (a wheel
built from the working tree), install a fresh venv from *that folder's* requirements.txt plus the gradio of its
sdk_version (cached under /tmp by the hash of what it installs, so a rerun only reinstalls tpo_core), run its
`python app.py` from the folder with no PYTHONPATH on a loopback port (GRADIO_SERVER_PORT, as Spaces sets it to
7860), wait for HTTP 200 and train at the defaults until the first streamed update. Screenshots go to
_build/screenshots/space/.
"""

import fcntl
import hashlib
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from demos import server_process
from space import assemble
from tests.conftest import open_page

ROOT = pathlib.Path(__file__).resolve().parents[1]
FAKE_REF = "0123456789abcdef0123456789abcdef01234567"
SPACES_COLORS = {"red", "yellow", "green", "blue", "indigo", "purple", "pink", "gray"}  # the values Spaces accepts
NOT_IN_THE_SPACE = {
    "torch",
    "jupyter-book",
    "jupytext",
    "nbclient",
    "ipykernel",
    "sphinx-proof",
    "sphinx-exercise",
    "transformers",
    "trl",
    "verl",
    "ray",
    "accelerate",
    "datasets",
    "pytest",
    "playwright",
    "hypothesis",
    "reasoning-gym",
    "gguf",
    "matplotlib",
    "gradio",
}  # gradio: Spaces installs it from sdk_version; ipywidgets and
# anywidget are tpo_core dependencies (its notebook widget), so they are in


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\[=<>@ ;]", requirement.strip(), maxsplit=1)[0]).lower()


def _lines(path: pathlib.Path) -> list:
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def _front_matter(readme: pathlib.Path) -> dict:
    text = readme.read_text()
    assert text.startswith("---\n"), "a Space card starts with its YAML front matter"
    block = text.split("\n---\n", 1)[0][len("---\n") :]
    return yaml.safe_load(block)


def _config_repository() -> tuple:
    """(url, owner, name) of _config.yml's repository, parsed here with a YAML parser."""
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    parts = urllib.parse.urlparse(url)
    assert parts.scheme == "https" and parts.netloc == "github.com"
    owner, name = parts.path.strip("/").removesuffix(".git").split("/")
    return url, owner, name


def _run_assemble(*args):
    return subprocess.run(
        [sys.executable, "-m", "space.assemble", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=120,
    )


@pytest.fixture(scope="module")
def assembled(tmp_path_factory):
    out = tmp_path_factory.mktemp("space-fast") / "space"
    r = _run_assemble("--out", str(out), "--ref", FAKE_REF)
    assert r.returncode == 0, r.stderr
    return out


# ------------------------------------------------------------------------------------------------------------------
# the folder
# ------------------------------------------------------------------------------------------------------------------
def test_front_matter_is_a_valid_space_card(assembled):
    fm = _front_matter(assembled / "README.md")
    gradio_pins = [ln for ln in _lines(ROOT / "requirements.txt") if _name(ln) == "gradio"]
    assert len(gradio_pins) == 1 and "==" in gradio_pins[0]
    assert fm["sdk"] == "gradio"
    assert fm["sdk_version"] == gradio_pins[0].split("==")[1]  # a string: YAML would read 6.31 as a float
    assert fm["app_file"] == "app.py" and (assembled / fm["app_file"]).is_file()
    assert fm["python_version"] == f"{sys.version_info.major}.{sys.version_info.minor}" == "3.11"
    assert isinstance(fm["title"], str) and fm["title"] and isinstance(fm["emoji"], str) and fm["emoji"]
    assert fm["colorFrom"] in SPACES_COLORS and fm["colorTo"] in SPACES_COLORS
    assert isinstance(fm["short_description"], str) and 0 < len(fm["short_description"]) <= 60  # Spaces' limit
    # the code's licence: the first identifier of pyproject's SPDX expression (the rest covers the shipped MNIST data)
    pyproject_license = re.search(r'^license = "([\w.-]+)', (ROOT / "pyproject.toml").read_text(), re.M)
    assert pyproject_license and fm["license"] == pyproject_license.group(1).lower()


def test_requirements_are_tpo_core_and_the_demo_dependencies_only(assembled):
    lines = _lines(assembled / "requirements.txt")
    names = [_name(ln) for ln in lines]
    assert len(names) == len(set(names))
    assert not set(names) & NOT_IN_THE_SPACE, set(names) & NOT_IN_THE_SPACE
    url, _, _ = _config_repository()
    assert lines[names.index("tpo-core")] == f"tpo_core @ git+{url}.git@{FAKE_REF}"
    repo = {_name(ln): ln for ln in _lines(ROOT / "requirements.txt")}
    for ln in lines:
        if _name(ln) != "tpo-core":  # every other line is the repository's own pin, verbatim
            assert "==" in ln and ln == repo[_name(ln)], ln
    assert "jax[cpu]==" in " ".join(lines)  # the CPU build (a Space's free hardware)
    # tpo_core's own dependencies (pyproject.toml) are pinned too, and the demo's imports are covered
    deps = re.search(r"^dependencies = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.S | re.M).group(1)
    assert {_name(d) for d in re.findall(r'"([^"]+)"', deps)} <= set(names)
    imported = {
        m for f in (ROOT / "demos").glob("*.py") for m in re.findall(r"^\s*(?:import|from) (\w+)", f.read_text(), re.M)
    }
    third_party = imported - set(sys.stdlib_module_names) - {"tpo_core", "gradio", "__future__"}
    assert {_name(m) for m in third_party} <= set(names), third_party


def test_folder_holds_the_demo_package_and_the_results(assembled):
    for f in (ROOT / "demos").glob("*.py"):
        assert (assembled / "demos" / f.name).read_bytes() == f.read_bytes()
    assert not list(assembled.rglob("__pycache__"))
    assert (assembled / "app.py").read_bytes() == (ROOT / "space" / "app.py").read_bytes()
    summaries = sorted(p.relative_to(ROOT / "results") for p in (ROOT / "results").rglob("summary.json"))
    assert summaries and summaries == sorted(
        p.relative_to(assembled / "results") for p in (assembled / "results").rglob("summary.json")
    )
    assert not list((assembled / "results").rglob("*.npz"))  # the runs' arrays stay in the repository
    leftovers = [p.name for p in assembled.parent.iterdir() if p.name != assembled.name]
    assert not leftovers, leftovers  # the temporary folder beside --out was renamed into place


def test_refuses_a_non_empty_out_and_bad_arguments(tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    for args in (
        ["--out", str(out), "--ref", FAKE_REF],
        ["--out", str(tmp_path / "a"), "--ref", "main"],
        ["--out", str(tmp_path / "b"), "--tpo-core", str(tmp_path / "nowhere")],
        [],
    ):
        r = _run_assemble(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.startswith("space.assemble: error: ")
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy"]  # nothing half-written anywhere


def test_an_empty_out_and_a_local_clone(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    r = _run_assemble("--out", str(out), "--tpo-core", str(ROOT))
    assert r.returncode == 0, r.stderr
    lines = _lines(out / "requirements.txt")
    assert lines[0] == f"tpo_core @ {ROOT.resolve().as_uri()}"


# ------------------------------------------------------------------------------------------------------------------
# one Space, one book: _config.yml's repository url
# ------------------------------------------------------------------------------------------------------------------
def test_links_name_the_space_and_the_book_of_config_yml():
    url, owner, name = _config_repository()
    space_url = f"https://huggingface.co/spaces/{owner}/{name}"
    book_workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    steps = [s.get("uses", "") for job in book_workflow["jobs"].values() for s in job["steps"]]
    assert any(s.startswith("actions/deploy-pages@") for s in steps)  # the book is published on GitHub Pages
    book_url = f"https://{owner.lower()}.github.io/{name}/"  # a project site: <owner>.github.io/<repository>/
    assert (assemble.space_url(), assemble.book_url(), assemble.repository_url()) == (space_url, book_url, url)
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.index("## Quick start")
    for link in (space_url, book_url):
        assert link in readme[quick_start : quick_start + 1000], f"README.md: no {link} in the quick start"
    assert space_url in (ROOT / "book" / "intro.md").read_text(), f"book/intro.md: no {space_url}"
    card = (ROOT / "space" / "README.md").read_text()
    assert url in card and book_url in card
    # any other link to a Space, or to this owner's Pages site, would be a second source of truth
    for path in (ROOT / "README.md", ROOT / "book" / "intro.md", ROOT / "space" / "README.md"):
        text = path.read_text()
        for found in re.findall(r"https://huggingface\.co/spaces/[\w.-]+/[\w.-]+", text):
            assert found.rstrip(".") == space_url, (path.name, found)
        for found in re.findall(rf"https://{re.escape(owner.lower())}\.github\.io/[\w./-]*", text, re.I):
            assert found.startswith(book_url), (path.name, found)


def test_workflow_uploads_on_push_to_main_with_the_secret_token():
    text = (ROOT / ".github" / "workflows" / "space.yml").read_text()
    wf = yaml.safe_load(text)
    push = wf[True]["push"]  # YAML 1.1 reads the key `on` as True
    assert push["branches"] == ["main"] and {"demos/**", "tpo_core/**", "space/**"} <= set(push["paths"])
    (job,) = wf["jobs"].values()
    assert job["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
    runs = [s for s in job["steps"] if "run" in s]
    assert any("python -m space.assemble" in s["run"] and "$GITHUB_SHA" in s["run"] for s in runs)
    upload = [s for s in runs if "space.upload" in s["run"]]
    assert len(upload) == 1 and upload[0]["if"] == "${{ env.HF_TOKEN != '' }}"  # skipped without the secret
    assert "upload_folder" in (ROOT / "space" / "upload.py").read_text()
    # no token in code: Hugging Face tokens start with hf_ followed by 30+ letters
    for path in [ROOT / ".github" / "workflows" / "space.yml", *(ROOT / "space").glob("*")]:
        if path.is_file():
            assert not re.search(r"hf_[A-Za-z0-9]{30,}", path.read_text()), path


def test_upload_without_a_token_says_so(tmp_path, assembled):
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    r = subprocess.run(
        [sys.executable, "-m", "space.upload", str(assembled)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(env, PYTHONPATH=str(ROOT)),
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.strip() == "space.upload: error: HF_TOKEN is not set"


# ------------------------------------------------------------------------------------------------------------------
# the Space as Spaces runs it: a fresh venv from its requirements, `python app.py`, Chromium
# ------------------------------------------------------------------------------------------------------------------
VENV_ROOT = pathlib.Path(os.environ.get("TPO_SPACE_VENV_DIR", "/tmp"))
INDEX = "https://pypi.org/simple/"


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen(INDEX + "pip/", timeout=10) as r:
            return r.status == 200
    except OSError:
        return False


def _unavailable(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _wheel_from_this_clone(tmp: pathlib.Path) -> pathlib.Path:
    """tpo_core's wheel built from the working tree (copied first: setuptools writes build/ beside its sources)."""
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "tpo_core", src / "tpo_core", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp / "wheel"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = (tmp / "wheel").glob("tpo_core-*.whl")
    return wheel


def _space_venv(folder: pathlib.Path, gradio: str) -> pathlib.Path:
    """A venv holding exactly the folder's requirements and the sdk's gradio, cached by what it installs."""
    reqs = _lines(folder / "requirements.txt")
    third_party = sorted(ln for ln in reqs if _name(ln) != "tpo-core")
    key = hashlib.sha256("\n".join([sys.version, gradio, *third_party]).encode()).hexdigest()[:16]
    venv = VENV_ROOT / f"tpo-space-venv-{key}"
    with open(VENV_ROOT / f"tpo-space-venv-{key}.lock", "w") as lock:  # another session may be building it
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _fill_venv(venv, folder, gradio, reqs)


def _fill_venv(venv: pathlib.Path, folder: pathlib.Path, gradio: str, reqs: list) -> pathlib.Path:
    python = venv / "bin" / "python"
    # pip must not see this checkout: with its PYTHONPATH, the repository's tpo_core counts as "already
    # installed" and a fresh venv ends up without one
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    if not (venv / ".complete").is_file():
        if not _pypi_reachable():
            _unavailable(f"PyPI ({INDEX}) is unreachable: cannot install the Space's requirements into a fresh venv")
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        t0 = time.time()
        r = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "-r", str(folder / "requirements.txt"), gradio],
            capture_output=True,
            text=True,
            timeout=1200,
            env=env,
        )
        assert r.returncode == 0, r.stderr[-4000:]
        check = subprocess.run(
            [str(python), "-m", "pip", "check"], capture_output=True, text=True, timeout=300, env=env
        )
        assert check.returncode == 0, check.stdout
        (venv / ".complete").write_text(f"installed in {time.time() - t0:.0f} s\n")
    else:  # the same third-party set: only this run's tpo_core changes
        line = next(ln for ln in reqs if _name(ln) == "tpo-core")
        r = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", line],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert r.returncode == 0, r.stderr[-4000:]
    return python


def _space_env(port: int, home: pathlib.Path) -> dict:
    """The environment of a Space: nothing of this checkout (no PYTHONPATH, no shared data or results)."""
    # XLA_FLAGS stays: tests/conftest.py's fast-compile flags change how long compiling takes, not what runs
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPO_", "PYTHON", "VIRTUAL_ENV", "GRADIO_"))}
    env.update(
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        GRADIO_ANALYTICS_ENABLED="False",
        PYTHONUNBUFFERED="1",
        TPO_CACHE_DIR=str(home / "cache"),
        TPO_JAX_CACHE=str(home / "jax"),
        TPO_DEMO_WARM="0",
    )  # warm-up off: the click compiles the default run once instead of twice at once
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.browser
def test_space_runs_as_spaces_runs_it(tmp_path, browser, screenshots_dir):
    timings = {}
    t0 = time.time()
    wheel = _wheel_from_this_clone(tmp_path)
    folder = tmp_path / "space"
    r = _run_assemble("--out", str(folder), "--tpo-core", str(wheel))
    assert r.returncode == 0, r.stderr
    gradio = f"gradio=={_front_matter(folder / 'README.md')['sdk_version']}"
    python = _space_venv(folder, gradio)
    timings["venv"] = time.time() - t0
    t1 = time.time()

    port = _free_port()
    env = _space_env(port, tmp_path)
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.util as u, tpo_core; print(tpo_core.__file__); print(u.find_spec('torch') is None)",
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    where, no_torch = probe.stdout.split()
    assert pathlib.Path(where).is_relative_to(python.parent.parent), where  # the venv's tpo_core, not this clone's
    assert no_torch == "True"
    timings["probe"] = time.time() - t1

    t1 = time.time()
    proc = subprocess.Popen(
        [str(python), "app.py"], cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    log = []
    threading.Thread(target=lambda: log.extend(ln.rstrip() for ln in proc.stdout), daemon=True).start()
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.time() + 180
        while True:
            assert proc.poll() is None, "app.py exited:\n" + "\n".join(log[-40:])
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            assert time.time() < deadline, f"no HTTP 200 on {url} within 180 s:\n" + "\n".join(log[-40:])
            time.sleep(0.5)
        timings["http_200"] = time.time() - t1

        out = screenshots_dir / "space"
        out.mkdir(exist_ok=True)
        context, page, errors = open_page(browser, 1400, 1000)
        try:
            t2 = time.time()
            page.goto(url)
            page.wait_for_selector("#explorer-bars .js-plotly-plot", timeout=60_000)
            timings["page"] = time.time() - t2
            assert page.title() == "TPO, interactively"
            page.get_by_role("tab", name="Paper results").click()
            page.wait_for_function(  # the results' summaries came with the folder
                "() => document.querySelector('#paper-md').innerText.includes('Reproduced here')", timeout=30_000
            )
            page.get_by_role("tab", name="Live training").click()
            t2 = time.time()
            page.locator("#train-start").click()
            try:  # the first streamed update: a step count above zero, after compiling the default run
                page.wait_for_function(
                    "() => /[1-9][\\d,]* \\/ [\\d,]+ steps/.test(document.querySelector('#train-status').innerText)",
                    timeout=240_000,
                )
            except Exception as e:
                page.screenshot(path=str(out / "first_update_timeout.png"), full_page=True)
                raise AssertionError(
                    f"no streamed update; status {page.locator('#train-status').inner_text()!r}; "
                    "server log:\n" + "\n".join(log[-40:])
                ) from e
            timings["first_update"] = time.time() - t2
            n_points = page.evaluate("""() => document.querySelector('#train-error .js-plotly-plot')._fullData
                .filter(t => t.y && t.y.length > 0).length""")
            assert n_points >= 2  # TPO's and GRPO's error curves
            page.screenshot(path=str(out / "space_training.png"), full_page=True)
            assert not page.evaluate(
                "() => document.querySelectorAll('#train-status .error, .toast-body.error').length"
            ), "error badge"
        finally:
            context.close()
        assert not errors, f"JavaScript errors in the page: {errors}"
        assert any("[tpo_core.lab.mnist]" in ln for ln in log), "\n".join(log[-40:])  # the bandit's data was found
    finally:  # ends the run too (the server's training thread dies with it)
        server_process.stop(proc)
    timings["total"] = time.time() - t0
    print("space test wall times (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
