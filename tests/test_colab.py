"""Colab, simulated: a fresh virtual environment whose jax is *not* the one requirements.txt pins (Colab
ships its own build), a stand-in ``google.colab`` module, the chapter's own install cell from its
committed notebook (what the Colab button opens), pointed at this checkout instead of GitHub, then the
chapter's cells at the quick budget in that environment's kernel.

What it checks: the install cell keeps the preinstalled jax/jaxlib (its constraints work), ``tpo_core``
installs from the repository with them, and the chapter runs against the installed package, not the
checkout. Needs the package index (PyPI); without it the test skips (fails under CI=true).
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import time

import pytest

from book import sync

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTER = "01_policy_gradients"     # cheap (≈ 10 s of cells on a CPU) and the first page a reader opens
COLAB_JAX = "0.9.2"                 # any jax other than requirements.txt's, with a py3.11 CPU wheel
KERNEL_PACKAGES = ["ipykernel==7.4.0", "nbclient==0.11.0", "jupytext==1.19.6"]


def _pinned_jax() -> str:
    text = (ROOT / "requirements.txt").read_text()
    return re.search(r"^jax(?:\[\w+\])?==(\S+)", text, re.M).group(1)


def _offline(why: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"the Colab simulation needs the package index: {why}")
    pytest.skip(f"the package index is unreachable, so no fresh environment can be built: {why}")


def _run(cmd, timeout, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def _head_commit() -> str:
    out = _run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], 30)
    if out.returncode != 0:
        pytest.skip("not a git checkout: the install cell installs from a git URL")
    return out.stdout.strip()


COLAB_OUTPUT = textwrap.dedent('''
    """Stand-in for google.colab.output: the names jax imports when it sees Colab (no-ops here)."""
    import contextlib


    def eval_js(script, ignore_result=False):
        return None


    def register_callback(name, callback):
        return None


    def clear(wait=False, output_tags=()):
        return None


    @contextlib.contextmanager
    def use_tags(tags):
        yield


    @contextlib.contextmanager
    def redirect_to_element(selector):
        yield
''')
ANSI = re.compile(r"\x1b\[[0-9;]*m")

DRIVER = textwrap.dedent('''
    """Run inside the simulated Colab environment: execute a notebook, print one JSON line."""
    import json, sys, time
    import jupytext, nbclient, nbformat

    nb = jupytext.read(sys.argv[1])
    t0 = time.perf_counter()
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3", allow_errors=False)
    try:
        client.execute()
        error = None
    except Exception as exc:  # noqa: BLE001 - reported to the test
        error = f"{type(exc).__name__}: {exc}"[-4000:]
    streams = ["".join(o.get("text", "")) for c in nb.cells if c.cell_type == "code"
               for o in c.get("outputs", []) if o.get("output_type") == "stream"]
    print(json.dumps({"error": error, "seconds": time.perf_counter() - t0, "stdout": streams}))
''')


def test_chapter_runs_in_a_simulated_colab_and_keeps_its_jax(tmp_path):
    t_start = time.perf_counter()
    assert COLAB_JAX != _pinned_jax(), "the simulation must start from a jax other than requirements.txt's"
    commit = _head_commit()

    # 1. the package index: can we fetch the stand-in Colab jax at all?
    probe = _run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(tmp_path / "probe"),
                  f"jax=={COLAB_JAX}"], 300)
    if probe.returncode != 0:
        _offline(probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "pip download failed")

    # 2. a fresh environment (no system site-packages) with Colab's "preinstalled" jax and a kernel
    venv = tmp_path / "colab-venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], 300)
    assert made.returncode == 0, made.stderr
    py = venv / "bin" / "python"
    pip = _run([str(py), "-m", "pip", "install", "-q", f"jax=={COLAB_JAX}", f"jaxlib=={COLAB_JAX}",
                *KERNEL_PACKAGES], 900)
    if pip.returncode != 0 and ("Could not find" in pip.stderr or "connection" in pip.stderr.lower()):
        _offline(pip.stderr.strip().splitlines()[-1])
    assert pip.returncode == 0, pip.stderr[-3000:]

    # 3. the stand-in google.colab module (Colab imports it at start-up; the install cell looks for it)
    stub = tmp_path / "colab-stub"
    (stub / "google" / "colab").mkdir(parents=True)
    (stub / "google" / "__init__.py").write_text("")
    (stub / "google" / "colab" / "__init__.py").write_text('"""Stand-in for Colab\'s module (tests/test_colab.py)."""\n')
    (stub / "google" / "colab" / "output.py").write_text(COLAB_OUTPUT)   # jax's debugger imports it on Colab

    # 4. the chapter as Colab opens it: the committed notebook, its install cell pointed at this checkout
    nb = json.loads((ROOT / "book" / f"{CHAPTER}.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    install = "".join(code[0]["source"])
    assert "google.colab" in install and "pip" in install, "the first code cell is not the Colab install cell"
    local = f"file://localhost{ROOT}@{commit}"    # PEP 508 wants a host in the URL (pip <24 rejects file:///)
    rewritten, n = re.subn(r'^(\s*REPOSITORY\s*=\s*)"[^"]*"', lambda m: f'{m.group(1)}"{local}"', install, flags=re.M)
    assert n == 1, f"{CHAPTER}.ipynb: no REPOSITORY line in the install cell:\n{install}"
    code[0]["source"] = rewritten
    first = nb["cells"].index(code[0])
    check = textwrap.dedent(f'''
        import importlib.metadata, jax
        assert jax.__version__ == "{COLAB_JAX}", f"the install cell replaced Colab's jax with {{jax.__version__}}"
        assert importlib.metadata.version("jaxlib") == "{COLAB_JAX}", "the install cell replaced Colab's jaxlib"
        import tpo_core, pathlib
        assert "site-packages" in tpo_core.__file__, f"tpo_core came from {{tpo_core.__file__}}, not the install"
        print("colab-sim: jax", jax.__version__, "kept; tpo_core from", pathlib.Path(tpo_core.__file__).parent)
    ''')
    cell = lambda src: {"cell_type": "code", "metadata": {}, "source": src, "outputs": [], "execution_count": None}
    nb["cells"][first + 1:first + 1] = [cell(check)]
    nb["cells"].insert(0, cell("import google.colab  # Colab imports it at start-up\n"))
    work = tmp_path / "content"                        # Colab's working folder; nothing of the checkout in it
    work.mkdir()
    (work / f"{CHAPTER}.ipynb").write_text(json.dumps(nb))
    (work / "driver.py").write_text(DRIVER)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TPO_BOOK_BUILD")}
    env.update(PYTHONPATH=str(stub), TPO_QUICK="1", PATH=f"{venv / 'bin'}:{env.get('PATH', '')}",
               TPO_JAX_CACHE=str(tmp_path / "jax-cache"), PYTHONNOUSERSITE="1")
    env.pop("XLA_FLAGS", None)
    run = _run([str(py), "driver.py", f"{CHAPTER}.ipynb"], 1800, cwd=work, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["error"] is None, ANSI.sub("", report["error"] + "\n--- output of the first cells:\n"
                                             + "\n".join(report["stdout"][:4]))
    assert any("colab-sim: jax " + COLAB_JAX in s for s in report["stdout"]), report["stdout"][:3]

    # 5. after the whole chapter, the environment still has Colab's jax
    after = _run([str(py), "-c", "import jax, jaxlib; print(jax.__version__, jaxlib.__version__)"], 120, env=env)
    assert after.stdout.split() == [COLAB_JAX, COLAB_JAX], after.stdout + after.stderr
    print(f"Colab simulation of {CHAPTER}: cells {report['seconds']:.0f} s, "
          f"whole test {time.perf_counter() - t_start:.0f} s")


def test_the_install_cell_the_simulation_rewrites_is_the_synced_one():
    """The simulation edits the notebook's REPOSITORY line; it must be the one book.sync took from _config.yml."""
    md = ROOT / "book" / f"{CHAPTER}.md"
    cells = sync.to_ipynb(md).cells
    install = next(c.source for c in cells if sync.is_install_cell(c))
    assert f'REPOSITORY = "{sync.repository()}"' in install
