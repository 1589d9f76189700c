"""The wheel stands alone: ``python -m build`` makes an sdist and a wheel from the package's sources (copied out
of the checkout, so the build writes nothing here), ``twine check --strict`` passes, the metadata is pyproject's,
and the wheel installed in a fresh venv, run from an empty folder with no PYTHONPATH, gives a working ``tpo``
console script and ``python -m tpo_core``, finds its MNIST test set and verl config inside itself, and reports
pyproject's version; its PyTorch bridge imports with JAX (and NumPy) made unimportable; its ``[trl]``, ``[verl]``
and ``[llm]`` extras resolve with the repository's pins (a ``pip --dry-run``: verl and ray are too heavy to
install here).

The fresh venv's dependencies are the wheel's own (pyproject's, which the metadata test compares), installed under
requirements.txt's pins as constraints so the run is reproducible, and cached under /tmp keyed by that list
(tests/fresh_venv.py, which also builds it in the background as the session starts); each session installs the
wheel with --no-deps into a new venv layered on the cached one, then ``pip check``. ``TPO_WHEEL_DIST`` names a
folder with an already built sdist and wheel to check instead (the release workflow: the files it publishes).
Needs the package index to build; without it the tests skip (fail under CI=true).
"""

from __future__ import annotations

import email.parser
import importlib.util
import json
import math
import os
import pathlib
import re
import shutil
import sys
import tarfile
import textwrap
import tomllib
import zipfile

import pytest

from tests import fresh_venv
from tests.fresh_venv import ROOT, run

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
# what the sdist is built from: the package and the files pyproject and MANIFEST.in name
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "CHANGELOG.md", "tpo_core")
MNIST_FILES = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def test_the_version_is_written_once_and_the_package_reports_it():
    """pyproject.toml holds the only version literal; ``tpo_core.__version__`` reads it (the checkout's, here)."""
    import tpo_core

    text = (ROOT / "pyproject.toml").read_text()
    assert len(re.findall(r"^version = ", text, re.M)) == 1 and "dynamic" not in PYPROJECT["project"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), VERSION
    assert tpo_core.__version__ == VERSION
    literals = [p for p in (ROOT / "tpo_core").rglob("*.py") if re.search(r"^__version__ = ['\"]", p.read_text(), re.M)]
    assert literals == [], literals
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(VERSION)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.M), (
        f"CHANGELOG.md has no entry for {VERSION}"
    )


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> pathlib.Path:
    """The sdist and the wheel: $TPO_WHEEL_DIST's, or built here by ``python -m build`` (wheel from the sdist)."""
    given = os.environ.get("TPO_WHEEL_DIST")
    if given:
        return pathlib.Path(given).resolve()
    if importlib.util.find_spec("build") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the build package is missing (pip install -r requirements.txt)")
        pytest.skip("the build package is missing (pip install -r requirements.txt)")
    base = tmp_path_factory.mktemp("wheel-build")
    src = base / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    out = base / "dist"
    built = run([sys.executable, "-m", "build", "--outdir", out, src], 900, cwd=base, env=fresh_venv.clean_env(base))
    if built.returncode != 0:
        fresh_venv.needs_index(
            "python -m build (its isolated environment installs setuptools)", built.stdout + built.stderr
        )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert "Successfully built" in built.stdout
    return out


def _one(dist: pathlib.Path, pattern: str) -> pathlib.Path:
    found = sorted(dist.glob(pattern))
    assert len(found) == 1, f"expected one {pattern} in {dist}, found {[p.name for p in found]}"
    return found[0]


@pytest.fixture(scope="module")
def wheel(dist) -> pathlib.Path:
    return _one(dist, f"tpo_core-{VERSION}-py3-none-any.whl")


@pytest.fixture(scope="module")
def metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        return email.parser.Parser().parsestr(z.read(f"tpo_core-{VERSION}.dist-info/METADATA").decode())


@pytest.mark.slow
def test_twine_check_passes_and_the_readme_is_the_long_description(dist, metadata):
    checked = run([sys.executable, "-m", "twine", "check", "--strict", *sorted(dist.iterdir())], 300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2, checked.stdout
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert metadata.get_payload().strip() == (ROOT / "README.md").read_text().strip()


@pytest.mark.slow
def test_the_metadata_is_pyproject_s(metadata):
    project = PYPROJECT["project"]
    assert metadata["Name"] == "tpo_core" and metadata["Version"] == VERSION
    assert metadata["License-Expression"] == project["license"]
    assert sorted(metadata.get_all("License-File")) == sorted(project["license-files"])
    assert metadata["Requires-Python"] == project["requires-python"]
    from packaging.requirements import Requirement

    def same(rs):
        return sorted(str(Requirement(r)) for r in rs)  # specifiers in one order

    declared = metadata.get_all("Requires-Dist")
    assert same(r for r in declared if "extra ==" not in r) == same(project["dependencies"])
    assert set(metadata.get_all("Provides-Extra")) == set(project["optional-dependencies"])
    for extra, requirements in project["optional-dependencies"].items():
        assert same(r.split(";")[0] for r in declared if f'extra == "{extra}"' in r) == same(requirements), extra


@pytest.mark.slow
def test_the_wheel_and_the_sdist_carry_the_package_data(dist, wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    data = {f"tpo_core/lab/data/mnist/{n}" for n in (*MNIST_FILES, "README.md")} | {
        "tpo_core/bridge/verl_gsm8k.yaml",
        "tpo_core/lab/reproduce/presets.toml",
        "tpo_core/lab/live_budgets.toml",
    }
    assert data <= names, data - names
    assert {f"tpo_core-{VERSION}.dist-info/licenses/{f}" for f in PYPROJECT["project"]["license-files"]} <= names
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tpo_core").rglob("*.py")}
    assert modules <= names, modules - names  # every module, subpackages included
    assert not any(n.startswith(("tests/", "book/", "demos/", "results/")) for n in names)
    with zipfile.ZipFile(wheel) as z:
        entry_points = z.read(f"tpo_core-{VERSION}.dist-info/entry_points.txt").decode()
    assert "tpo = tpo_core.lab.cli:main" in entry_points and "tpo = tpo_core.bridge.verl" in entry_points

    with tarfile.open(_one(dist, f"tpo_core-{VERSION}.tar.gz")) as t:
        members = {m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name}
    assert {"pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md"} <= members
    assert {n for n in data} | modules <= members
    assert not any(m.startswith("tests/") for m in members)  # they need the whole repository (MANIFEST.in)


@pytest.fixture(scope="module")
def installed(wheel, metadata, tmp_path_factory):
    """(python, bin folder, an empty folder holding only a copy of the wheel, environment): the wheel installed
    with --no-deps into a new venv layered on a cached venv of its declared dependencies, then ``pip check``."""
    base = fresh_venv.wheel_deps_venv()  # pyproject's dependencies = the wheel's (the metadata test)
    home = tmp_path_factory.mktemp("fresh")
    python = fresh_venv.overlay_venv(base, home / "venv")
    empty = home / "empty"
    empty.mkdir()
    local = pathlib.Path(shutil.copy2(wheel, empty / wheel.name))
    env = fresh_venv.clean_env(home)
    done = run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check", local.name],
        600,
        cwd=empty,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    checked = run([python, "-m", "pip", "check"], 300, cwd=empty, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr  # every declared dependency is satisfied
    local.unlink()  # the folder the programs run in: empty
    return python, python.parent, empty, env


@pytest.mark.slow
def test_the_console_script_and_python_m_train_from_an_empty_folder(installed):
    python, bin_dir, empty, env = installed
    helped = run([bin_dir / "tpo", "--help"], 300, cwd=empty, env=env)
    assert helped.returncode == 0, helped.stderr[-3000:]
    assert all(cmd in helped.stdout for cmd in ("train", "reproduce", "report"))

    trained = run(
        [
            python,
            "-m",
            "tpo_core",
            "train",
            "--task",
            "reversal",
            "--reward",
            "terminal",
            "--method",
            "tpo",
            "--H",
            "3",
            "--B",
            "8",
            "--K",
            "4",
            "--episodes",
            "3",
            "--seeds",
            "1",
            "--quiet",
            "--out",
            "run.json",
        ],
        600,
        cwd=empty,
        env=env,
    )
    assert trained.returncode == 0, trained.stdout + trained.stderr[-3000:]
    assert re.search(r"^reversal tpo: final error \d+\.\d\d% \(1 seed, no SE\)", trained.stdout, re.M), trained.stdout
    result = json.loads((empty / "run.json").read_text())
    error = result["metrics"]["error"]
    assert len(error) == 1 and len(error[0]) == 3 and all(0.0 <= e <= 1.0 for e in error[0])
    assert result["config"]["H"] == 3 and result["config"]["K"] == 4

    listed = run([bin_dir / "tpo", "reproduce", "--list"], 300, cwd=empty, env=env)
    assert listed.returncode == 0, listed.stderr[-3000:]
    from tpo_core.lab import reproduce  # the checkout's presets, named by the installed copy

    assert all(name in listed.stdout for name in reproduce.PRESETS), listed.stdout
    assert sorted(p.name for p in empty.iterdir()) == ["run.json"]  # nothing else written where it ran


INSIDE = textwrap.dedent("""
    import importlib.metadata as md, importlib.resources as res, json, os, pathlib, sys
    import tpo_core
    from tpo_core.lab import mnist
    ds = mnist.load(allow_download=False)                  # no TPO_DATA_DIR, an empty cache: the shipped set
    eps = md.entry_points()
    print(json.dumps(dict(
        package=tpo_core.__file__, version=tpo_core.__version__, dist_version=md.version("tpo_core"),
        shipped=str(mnist.SHIPPED_DIR), source=ds.source, shapes=[ds.x_train.shape, ds.x_test.shape],
        labels=sorted(set(ds.y_train.tolist())), pixel_range=[float(ds.x_train.min()), float(ds.x_train.max())],
        verl_yaml=(res.files("tpo_core.bridge") / "verl_gsm8k.yaml").is_file(),
        scripts=[e.value for e in eps.select(group="console_scripts", name="tpo")],
        plugins=[e.value for e in eps.select(group="verl.plugins", name="tpo")],
        results=str(__import__("tpo_core.lab.reproduce.committed", fromlist=["x"]).find_results()),
    )))
""")


@pytest.mark.slow
def test_the_installed_package_finds_its_data_inside_itself(installed):
    python, _, empty, env = installed
    done = run([python, "-c", INSIDE], 300, cwd=empty, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    site = pathlib.Path(got["package"]).parent.parent
    assert site.name == "site-packages" and python.parent.parent in site.parents  # the new venv's own copy
    assert pathlib.Path(got["shipped"]) == site / "tpo_core" / "lab" / "data" / "mnist"
    assert "shipped with tpo_core, SHA-256 verified" in got["source"], got["source"]
    assert got["shapes"] == [[8000, 784], [2000, 784]] and got["labels"] == list(range(10))
    assert got["pixel_range"][0] == 0.0 and got["pixel_range"][1] == 1.0
    assert got["version"] == got["dist_version"] == VERSION  # no pyproject beside it: the metadata's
    assert (
        got["verl_yaml"] and got["scripts"] == ["tpo_core.lab.cli:main"] and got["plugins"] == ["tpo_core.bridge.verl"]
    )
    assert got["results"] == "None"  # no committed results/ where it runs: the book's readers get None


BRIDGE = textwrap.dedent("""
    import sys
    sys.path[:0] = [sys.argv[1], sys.argv[2]]            # the unpacked wheel, then torch's folder
    for name in ("jax", "jaxlib", "flax", "optax", "chex", "numpy"):
        sys.modules[name] = None                          # unimportable: an import of any of them raises
    import json, math, torch
    import tpo_core, tpo_core.bridge.torch_ops as T
    q = T.tpo_target(torch.log(torch.tensor([[0.4, 0.3, 0.2, 0.1]], dtype=torch.float64)),
                     torch.tensor([[0.0, 0.0, 1.0, 0.0]], dtype=torch.float64))
    loaded = sorted(k for k, v in sys.modules.items()
                    if v is not None and k.split(".")[0] in ("jax", "jaxlib", "flax", "optax", "chex", "numpy"))
    print(json.dumps(dict(q=q[0].tolist(), loaded=loaded, package=tpo_core.__file__, version=tpo_core.__version__)))
""")


@pytest.mark.slow
def test_the_torch_bridge_imports_without_jax(wheel, tmp_path):
    """The wheel's files alone (unpacked, no site hooks: ``python -S``) with this venv's torch, and jax, jaxlib,
    flax, optax, chex and numpy unimportable: ``tpo_core.bridge.torch_ops`` imports and computes TPO's target."""
    spec = importlib.util.find_spec("torch")
    if spec is None:
        if os.environ.get("CI") == "true":
            pytest.fail("torch is missing (requirements.txt pins torch==2.13.0)")
        pytest.skip("torch is missing (requirements.txt pins torch==2.13.0)")
    torch_site = pathlib.Path(spec.origin).parent.parent
    unpacked = tmp_path / "wheel"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(unpacked)
    done = run(
        [sys.executable, "-S", "-c", BRIDGE, unpacked, torch_site],
        300,
        cwd=tmp_path,
        env=fresh_venv.clean_env(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["loaded"] == [] and pathlib.Path(got["package"]).parent == unpacked / "tpo_core"
    assert got["version"] == VERSION
    # closed form: u = z-scored rewards (population std) = (-1, -1, 3, -1)/sqrt(3); q ∝ p_old · exp(u)
    p, u = [0.4, 0.3, 0.2, 0.1], [-1 / math.sqrt(3)] * 2 + [math.sqrt(3), -1 / math.sqrt(3)]
    w = [pi * math.exp(ui) for pi, ui in zip(p, u)]
    assert got["q"] == pytest.approx([wi / sum(w) for wi in w], rel=1e-12)


@pytest.mark.slow
def test_the_llm_extras_resolve_with_the_pins():
    """The LLM extras' requirements with the core dependencies (the wheel's ``[trl,verl,llm]``: the metadata test
    checks they are pyproject's) resolve with ``pip install --dry-run`` under requirements.txt's pins, picking each
    extra's pinned trainer: a dry run, since verl, ray and the rest are GBs (fresh_venv.extras_resolve; kept)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    picked = fresh_venv.extras_resolve()
    extras = PYPROJECT["project"]["optional-dependencies"]
    for extra in fresh_venv.LLM_EXTRAS:
        for req in map(Requirement, extras[extra]):
            name = canonicalize_name(req.name)
            assert name in picked and req.specifier.contains(picked[name]), (extra, str(req), picked.get(name))
    assert {"trl", "verl", "ray", "transformers", "torch"} <= set(picked)
