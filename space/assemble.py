"""Assemble the Hugging Face Space of the demo into a fresh folder (``make space``; the ``space`` workflow uploads it).

    python -m space.assemble --out DIR [--tpo-core PATH] [--ref COMMIT]
    python -m space.assemble --print space-id|space-url|book-url|repository-url

The folder holds what Spaces runs: ``README.md`` (the Space card; its front matter names the gradio version,
``sdk_version``, which Spaces installs), ``app.py`` (``python app.py``), a copy of the repository's ``demos/``
package, the reproduced results' ``summary.json`` / ``NOTES.md`` files (the "Paper results" tab reads them from
``results/``) and ``requirements.txt``: ``tpo_core`` plus the demo's third-party dependencies at the repository's
own pins (``requirements.txt``), nothing else; no gradio, which comes from ``sdk_version``.

``tpo_core`` is installed from this repository at one commit (``tpo_core @ git+<repository url>@<commit>``, the
repository url of ``_config.yml``; the commit is ``--ref`` or the checkout's HEAD), or with ``--tpo-core PATH``
from a local clone or wheel (``tpo_core @ file://PATH``), e.g. to try the Space before pushing.

Where the Space lives: one place, ``_config.yml``'s repository url, also the book's Colab and repository
buttons. Its owner and name are the Space's (https://huggingface.co/spaces/<owner>/<name>) and the book's
GitHub Pages site (https://<owner>.github.io/<name>/). The README, the book's intro and the workflow name them;
tests/test_space.py checks that they agree.

The folder is built beside ``--out`` and renamed into place, so ``--out`` either appears complete or not at all;
a non-empty ``--out`` is refused. Only the standard library is used: the workflow runs this before installing
anything.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPACE_DIR = pathlib.Path(__file__).resolve().parent

# The demo's third-party dependencies besides gradio (which Spaces installs from sdk_version): tpo_core's own
# (pyproject.toml) and what demos/ imports, pinned as in the repository's requirements.txt (jax's CPU build).
DEPENDENCIES = (
    "jax[cpu]",
    "jaxlib",
    "flax",
    "optax",
    "chex",
    "numpy",
    "scikit-learn",
    "plotly",
    "tqdm",
    "ipywidgets",
    "anywidget",
)
SPACE_FILES = ("README.md", "app.py")  # from space/, into the folder's root
RESULT_FILES = ("summary.json", "NOTES.md")  # per preset folder under results/ (figures stay out: ~5 MB each)


class AssembleError(Exception):
    """A bad input or repository state: the command line prints it as one line and exits 2."""


# --------------------------------------------------------------------------------------------
# where things live: _config.yml's repository url
# --------------------------------------------------------------------------------------------
def repository_url(config: pathlib.Path | None = None) -> str:
    """``repository: url:`` of the book's ``_config.yml`` (read without a YAML parser)."""
    text = (config or ROOT / "_config.yml").read_text()
    block = re.search(r"^repository:\s*\n((?:[ \t]+.*\n?|\s*\n)*)", text, re.M)
    url = block and re.search(r"^[ \t]+url:\s*[\"']?([^\s\"'#]+)", block.group(1), re.M)
    if not url:
        raise AssembleError("_config.yml has no repository: url:")
    return url.group(1).rstrip("/")


def owner_and_name(url: str | None = None) -> tuple[str, str]:
    url = url or repository_url()
    m = re.fullmatch(r"https://github\.com/([A-Za-z0-9-]+)/([A-Za-z0-9._-]+?)(?:\.git)?", url)
    if not m:
        raise AssembleError(f"repository url {url!r} is not https://github.com/<owner>/<name>")
    return m.group(1), m.group(2)


def space_id() -> str:
    return "/".join(owner_and_name())


def space_url() -> str:
    return f"https://huggingface.co/spaces/{space_id()}"


def book_url() -> str:
    """The book's GitHub Pages site (the book workflow deploys _build/html there; Pages lowercases the owner)."""
    owner, name = owner_and_name()
    return f"https://{owner.lower()}.github.io/{name}/"


# --------------------------------------------------------------------------------------------
# requirements
# --------------------------------------------------------------------------------------------
def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.split("[")[0]).lower()


def repository_pins(requirements: pathlib.Path | None = None) -> dict[str, str]:
    """{canonical name: the requirement line} for every ``name==version`` line of requirements.txt."""
    pins = {}
    for line in (requirements or ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9_.-]+(?:\[[A-Za-z0-9_,.-]+\])?)\s*==\s*(\S+)", line)
        if m:
            pins[_canonical(m.group(1))] = f"{m.group(1)}=={m.group(2)}"
    return pins


def gradio_pin() -> str:
    line = repository_pins().get("gradio")
    if not line:
        raise AssembleError("requirements.txt pins no gradio==<version>")
    return line.split("==", 1)[1]


def front_matter_field(readme: pathlib.Path, field: str) -> str | None:
    """One top-level ``field: value`` of a README's YAML front matter (quotes removed)."""
    m = re.match(r"---\n(.*?)\n---\n", readme.read_text(), re.S)
    if not m:
        return None
    v = re.search(rf"^{re.escape(field)}:\s*(.*?)\s*$", m.group(1), re.M)
    return v.group(1).strip("\"'") if v else None


def head_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        raise AssembleError("no git checkout to take the commit from: pass --ref COMMIT or --tpo-core PATH") from None
    return out.stdout.strip()


def _uncommitted_engine() -> bool:
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--", "tpo_core", "pyproject.toml"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return False
    return bool(out.stdout.strip())


def tpo_core_requirement(tpo_core: str | None = None, ref: str | None = None) -> str:
    if tpo_core:
        path = pathlib.Path(tpo_core).expanduser().resolve()
        if not (path.is_file() and path.suffix == ".whl") and not (path / "pyproject.toml").is_file():
            raise AssembleError(f"--tpo-core {tpo_core!r} is neither a tpo_core wheel nor a clone with pyproject.toml")
        return f"tpo_core @ {path.as_uri()}"
    if ref is None:
        ref = head_commit()
        if _uncommitted_engine():
            print(
                f"space.assemble: warning: tpo_core has uncommitted changes; the Space installs commit {ref[:12]}",
                file=sys.stderr,
            )
    if not re.fullmatch(r"[0-9a-f]{7,40}", ref):
        raise AssembleError(f"--ref {ref!r} is not a commit hash")
    return f"tpo_core @ git+{repository_url()}.git@{ref}"


def requirements_text(tpo_core_line: str) -> str:
    pins = repository_pins()
    missing = [d for d in DEPENDENCIES if _canonical(d) not in pins]
    if missing:
        raise AssembleError(f"requirements.txt pins none of {', '.join(missing)}")
    lines = [pins[_canonical(d)] for d in DEPENDENCIES]
    return (
        "# Written by space/assemble.py: tpo_core and the demo's dependencies at the repository's pins.\n"
        "# gradio itself is installed by Spaces from README.md's sdk_version.\n"
        + tpo_core_line
        + "\n"
        + "\n".join(lines)
        + "\n"
    )


# --------------------------------------------------------------------------------------------
# the folder
# --------------------------------------------------------------------------------------------
def check_sources() -> None:
    readme = SPACE_DIR / "README.md"
    sdk_version = front_matter_field(readme, "sdk_version")
    if sdk_version != gradio_pin():
        raise AssembleError(
            f"space/README.md has sdk_version {sdk_version!r} but requirements.txt pins "
            f"gradio=={gradio_pin()}: make them equal"
        )
    if front_matter_field(readme, "app_file") not in SPACE_FILES:
        raise AssembleError("space/README.md's app_file is not one of the files the Space gets")
    if not (ROOT / "demos" / "app.py").is_file():
        raise AssembleError("no demos/app.py in the repository")


def _fill(folder: pathlib.Path, requirements: str) -> None:
    for name in SPACE_FILES:
        shutil.copy2(SPACE_DIR / name, folder / name)
    shutil.copytree(ROOT / "demos", folder / "demos", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    results = ROOT / "results"
    if results.is_dir():
        for path in sorted(p for name in RESULT_FILES for p in results.rglob(name)):
            if ".checkpoints" in path.parts:
                continue
            target = folder / "results" / path.relative_to(results)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    (folder / "requirements.txt").write_text(requirements)


def assemble(out, tpo_core: str | None = None, ref: str | None = None) -> pathlib.Path:
    """Build the Space folder at ``out`` (which must not exist or be empty); returns its path."""
    out = pathlib.Path(out).expanduser().absolute()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise AssembleError(f"--out {str(out)!r} exists and is not an empty folder")
    check_sources()
    requirements = requirements_text(tpo_core_requirement(tpo_core, ref))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        _fill(tmp, requirements)
        tmp.chmod(0o777 & ~_umask())  # mkdtemp's 0700 -> what mkdir would have given
        os.replace(tmp, out)  # over an empty folder or none: the folder appears complete or not at all
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


PRINTABLE = {"space-id": space_id, "space-url": space_url, "book-url": book_url, "repository-url": repository_url}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m space.assemble", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="the folder to create (must not exist, or be empty)")
    ap.add_argument(
        "--tpo-core",
        metavar="PATH",
        help="install tpo_core from this local clone or wheel instead of the repository at a commit",
    )
    ap.add_argument(
        "--ref",
        metavar="COMMIT",
        help="the commit of the repository whose tpo_core the Space installs (default: this checkout's HEAD)",
    )
    ap.add_argument("--print", choices=sorted(PRINTABLE), dest="show", help="print one derived value and exit")
    args = ap.parse_args(argv)
    try:
        if args.show:
            print(PRINTABLE[args.show]())
            return 0
        if not args.out:
            raise AssembleError("--out DIR is required")
        if args.tpo_core and args.ref:
            raise AssembleError("--tpo-core and --ref are exclusive")
        out = assemble(args.out, tpo_core=args.tpo_core, ref=args.ref)
    except AssembleError as e:
        print(f"space.assemble: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # an unwritable --out, a file that vanished mid-copy
        print(f"space.assemble: error: {e}", file=sys.stderr)
        return 2
    print(f"space.assemble: wrote {out} (the Space {space_id()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
