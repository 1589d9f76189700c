"""Build the Jupyter Book (v1) offline, with zero warnings, and check what it produced.

    python -m book.build                 # the whole book (what `make book` runs; TPO_QUICK=1 there)
    python -m book.build --only 01,03    # intro + the chapters whose file names start with 01 / 03
    python -m book.build --existing-only # skip toc entries whose file does not exist yet
    python -m book.build --jobs 1        # Jupyter Book's own serial build (one page after another)

Steps:
1. ``TPO_BOOK_BUILD=1`` (``tpo_core.lab.figures.setup()`` then emits figures as ``text/html`` without
   plotly.js) and ``TPO_QUICK`` defaults to 1;
2. offline assets: ``plotly.min.js`` from the installed plotly package into ``book/_plotly/`` and
   MathJax 3 (``tex-svg.js``, one self-contained file) from the pip package ``django-static-mathjax``
   into ``book/_mathjax/`` (falls back to ``npm pack mathjax@3`` from the npm registry); nothing is
   fetched from any other host;
3. every chapter's Colab notebook must be in sync (``python -m book.sync --check``);
4. ``jupyter-book build . --all -W -n --keep-going`` from the repository root (output ``_build/``),
   log in ``_build/build.log``; with ``--jobs N`` > 1 (default: one per core, at most 4) the same configuration
   (``jupyter-book config sphinx .``) built by Sphinx with N worker processes (``book/jb_parallel.py``), which
   executes N pages at a time, slowest first;
5. the HTML is scanned: every toc page exists, no executed cell shows a traceback or an error,
   plotly.js and MathJax come from ``_static`` (no CDN), and the warning count is zero.

Exit status 0 only if all of that holds.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

BOOK = pathlib.Path(__file__).resolve().parent
ROOT = BOOK.parent
BUILD = ROOT / "_build"
HTML = BUILD / "html"
PLOTLY_DIR = BOOK / "_plotly"
MATHJAX_DIR = BOOK / "_mathjax"
MATHJAX_FILE = "tex-svg.js"
MATHJAX_NPM = "mathjax@3.2.2"
STAMP = BUILD / "tpo_build.json"  # what the last build did (read by tests/book_helpers.py)
CONF_PY = ROOT / "conf.py"  # `jupyter-book config sphinx .` writes it for a parallel build (gitignored)

# <script src> URLs of plotly or MathJax on another host: the pages must load both from _static.
CDN_PATTERN = re.compile(r"""<script[^>]+src=["'](?:https?:)?//[^"']*(?:plotly|mathjax)[^"']*["']""", re.I)


def log(msg: str) -> None:
    print(f"[book.build] {msg}", flush=True)


# --------------------------------------------------------------------------------------------
# offline assets
# --------------------------------------------------------------------------------------------
def copy_plotly() -> pathlib.Path:
    """plotly.min.js from the installed plotly package (the version that made the figures)."""
    import plotly

    src = pathlib.Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not src.exists():
        raise SystemExit(f"plotly.min.js not found in the plotly package at {src}")
    PLOTLY_DIR.mkdir(exist_ok=True)
    dst = PLOTLY_DIR / "plotly.min.js"
    if not dst.exists() or dst.stat().st_size != src.stat().st_size:
        shutil.copyfile(src, dst)
    return dst


def _mathjax_from_pip() -> pathlib.Path | None:
    try:
        import mathjax  # the pip package django-static-mathjax ships MathJax 3 as package data
    except ImportError:
        return None
    src = pathlib.Path(mathjax.__file__).parent / "static" / "mathjax" / "es5" / MATHJAX_FILE
    return src if src.exists() else None


def _mathjax_from_npm() -> pathlib.Path | None:
    npm = shutil.which("npm")
    if npm is None:
        return None
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tpo-mathjax-"))
    res = subprocess.run([npm, "pack", MATHJAX_NPM, "--silent"], cwd=tmp, capture_output=True, text=True)
    tarballs = list(tmp.glob("mathjax-*.tgz"))
    if res.returncode != 0 or not tarballs:
        return None
    with tarfile.open(tarballs[0]) as tar:
        member = tar.getmember(f"package/es5/{MATHJAX_FILE}")
        tar.extractall(tmp, members=[member], filter="data")
    return tmp / "package" / "es5" / MATHJAX_FILE


def copy_mathjax() -> pathlib.Path:
    """MathJax 3's single-file TeX-to-SVG bundle, so formulas render with no network."""
    dst = MATHJAX_DIR / MATHJAX_FILE
    src = _mathjax_from_pip()
    if src is None and dst.exists():
        return dst
    if src is None:
        src = _mathjax_from_npm()
    if src is None:
        raise SystemExit(
            "MathJax not found: `pip install django-static-mathjax==3.2.2.1` (in requirements.txt) "
            f"or make `npm pack {MATHJAX_NPM}` work"
        )
    MATHJAX_DIR.mkdir(exist_ok=True)
    if not dst.exists() or dst.stat().st_size != src.stat().st_size:
        shutil.copyfile(src, dst)
    return dst


# --------------------------------------------------------------------------------------------
# table of contents
# --------------------------------------------------------------------------------------------
def toc_files(toc_path: pathlib.Path = ROOT / "_toc.yml") -> list[str]:
    """Every document of the toc (root first), as paths without suffix relative to the repo root."""
    import yaml

    toc = yaml.safe_load(toc_path.read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    files += [c["file"] for c in toc.get("chapters", [])]
    return files


def source_of(docname: str) -> pathlib.Path | None:
    for suffix in (".md", ".ipynb"):
        p = ROOT / f"{docname}{suffix}"
        if p.exists():
            return p
    return None


def filtered_toc(keep) -> pathlib.Path:
    """A temporary toc with only the documents for which keep(docname) is true (root always kept)."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    parts = []
    for part in toc.get("parts", []):
        chapters = [c for c in part.get("chapters", []) if keep(c["file"])]
        if chapters:
            parts.append({**part, "chapters": chapters})
    toc["parts"] = parts
    BUILD.mkdir(exist_ok=True)
    path = BUILD / "_toc_subset.yml"
    path.write_text(yaml.safe_dump(toc, sort_keys=False))
    return path


# --------------------------------------------------------------------------------------------
# checks of the built HTML
# --------------------------------------------------------------------------------------------
def html_problems(docnames: list[str], html_dir: pathlib.Path | None = None) -> list[str]:
    """What is wrong with the built pages of these documents (empty when all is well)."""
    html_dir = HTML if html_dir is None else pathlib.Path(html_dir)
    found = []
    for doc in docnames:
        page = html_dir / f"{doc}.html"
        if not page.exists():
            found.append(f"{doc}.html was not built")
            continue
        text = page.read_text(encoding="utf-8")
        if "Traceback (most recent call last)" in text or re.search(r'class="output (?:traceback|error)', text):
            found.append(f"{doc}.html shows an error output of an executed cell")
        if CDN_PATTERN.search(text):
            found.append(f"{doc}.html loads plotly or MathJax from a CDN: {CDN_PATTERN.search(text).group(0)}")
        if "js-plotly-plot" in text or "Plotly.newPlot" in text:
            if "_static/plotly.min.js" not in text:
                found.append(f"{doc}.html has plotly figures but does not load _static/plotly.min.js")
        if 'class="math' in text and f"_static/{MATHJAX_FILE}" not in text:
            found.append(f"{doc}.html has math but does not load _static/{MATHJAX_FILE}")
    for asset in ("plotly.min.js", MATHJAX_FILE):
        if not (html_dir / "_static" / asset).exists():
            found.append(f"_static/{asset} was not shipped")
    return found


WARNING_RE = re.compile(r"(WARNING|ERROR|CRITICAL):")
SUBSET_NOISE = re.compile(
    r"unknown (source )?document|reference target not found|undefined label|toctree contains reference to", re.I
)
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


EXECUTED_RE = re.compile(r"(\S+)\.(?:md|ipynb): Executed notebook in ([0-9.]+) seconds")


def default_jobs() -> int:
    """Pages executed at once: one per usable core, at most four (each kernel holds its own JAX programs)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(4, cores))


def run_build(toc: pathlib.Path | None, jobs: int = 1) -> tuple[int, list[str], dict[str, float]]:
    """Run the build (``jupyter-book build``, or with jobs > 1 Sphinx's parallel build of the same configuration
    through book/jb_parallel.py); return its exit status, the warning lines and each executed page's execution time
    in seconds (from myst-nb's log lines)."""
    jupyter_book = pathlib.Path(sys.executable).with_name("jupyter-book")
    jupyter_book = str(jupyter_book) if jupyter_book.exists() else "jupyter-book"
    subset = ["--toc", str(toc)] if toc is not None else []
    if jobs > 1:
        # Jupyter Book's documented route to Sphinx's own options: its configuration as a conf.py, then sphinx-build
        # (the conf.py is this build's, removed after it). -E: a fresh environment, so that every page is read, and
        # so executed, at every build, as `jupyter-book build` does (it never reuses a saved environment)
        subprocess.run([jupyter_book, "config", "sphinx", ".", *subset], cwd=ROOT, check=True, capture_output=True)
        cmd = [
            sys.executable,
            "-m",
            "book.jb_parallel",
            str(jobs),
            "-b",
            "html",
            "-a",
            "-E",
            "-W",
            "-n",
            "--keep-going",
            "-d",
            str(BUILD / ".doctrees"),
            ".",
            str(HTML),
        ]
    else:
        cmd = [jupyter_book, "build", ".", "--all", "-W", "-n", "--keep-going", *subset]
    if toc is not None:  # a subset: links to the pages left out are expected to dangle (checked below)
        cmd = [c for c in cmd if c != "-W"]
    log(" ".join(cmd))
    BUILD.mkdir(exist_ok=True)
    warnings, executed = [], {}
    try:
        with open(BUILD / "build.log", "w", encoding="utf-8") as logfile:
            proc = subprocess.Popen(
                cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=os.environ
            )
            for line in proc.stdout:
                sys.stdout.write(line)
                logfile.write(line)
                clean = ANSI_RE.sub("", line).rstrip()
                if WARNING_RE.search(clean):
                    warnings.append(clean)
                if m := EXECUTED_RE.search(clean):
                    page = pathlib.Path(m.group(1)).resolve()
                    executed[page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else str(page)] = float(
                        m.group(2)
                    )
            rc = proc.wait()
    finally:
        CONF_PY.unlink(missing_ok=True)
    return rc, warnings, executed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m book.build", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated chapter prefixes (e.g. 01,03): build the preface, these pages and the references only",
    )
    parser.add_argument("--existing-only", action="store_true", help="leave out toc entries with no file yet")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="pages executed at once (default: one per core, at most 4; 1 = Jupyter Book's own serial build)",
    )
    parser.add_argument("--no-sync-check", action="store_true", help="do not require the .ipynb pairs in sync")
    args = parser.parse_args(argv)
    jobs = default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        print(f"python -m book.build: --jobs must be at least 1, got {jobs}", file=sys.stderr)
        return 2

    t0 = time.perf_counter()
    STAMP.unlink(missing_ok=True)
    os.environ["TPO_BOOK_BUILD"] = "1"
    os.environ.setdefault("TPO_QUICK", "1")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # silence debugpy's frozen-modules note on stderr

    log(f"plotly.js: {copy_plotly().relative_to(ROOT)}; MathJax: {copy_mathjax().relative_to(ROOT)}")

    docs = toc_files()
    toc = None
    if args.only:
        prefixes = [p.strip() for p in args.only.split(",") if p.strip()]

        def keep(d):  # the references page too: the citations need it
            name = pathlib.PurePath(d).name
            return name == "references" or any(name.startswith(p) for p in prefixes)

        toc = filtered_toc(keep)
        docs = toc_files(toc)
    elif args.existing_only:
        toc = filtered_toc(lambda d: source_of(d) is not None)
        docs = toc_files(toc)

    if not args.no_sync_check:  # the Colab notebooks of the pages being built must match them
        from . import sync

        built = {pathlib.PurePath(d).name for d in docs}
        stale = {name: why for name, why in sync.check().items() if pathlib.PurePath(name).stem in built}
        if stale:
            for name, why in stale.items():
                log(f"stale Colab notebook book/{name}: {'; '.join(why)}")
            log("run `python -m book.sync` first")
            return 1

    missing = [d for d in docs if source_of(d) is None]
    if missing:
        log(f"toc entries without a file: {', '.join(missing)} (use --existing-only while chapters are written)")

    rc, warnings, executed = run_build(toc, jobs)
    if toc is not None:
        dangling = [w for w in warnings if SUBSET_NOISE.search(w)]
        if dangling:
            log(f"ignored {len(dangling)} warning(s) about pages left out of this subset build")
        warnings = [w for w in warnings if not SUBSET_NOISE.search(w)]
    elapsed = time.perf_counter() - t0
    problems = [] if rc == 0 else [f"jupyter-book exited with status {rc}"]
    if warnings:
        problems.append(f"{len(warnings)} warning(s):\n  " + "\n  ".join(warnings))
    problems += html_problems(docs)
    log(
        f"built {len(docs)} pages in {elapsed:.0f} s, {jobs} at a time (TPO_QUICK={os.environ['TPO_QUICK']}) -> "
        f"{HTML.relative_to(ROOT)}"
    )
    for doc, seconds in sorted(executed.items(), key=lambda kv: -kv[1]):
        log(f"  executed {doc} in {seconds:.0f} s")
    STAMP.write_text(
        json.dumps(
            {
                "ok": not problems,
                "full": toc is None,
                "docs": docs,
                "warnings": warnings,
                "problems": problems,
                "seconds": round(elapsed, 1),
                "returncode": rc,
                "jobs": jobs,
                "executed_s": executed,
                "quick": os.environ["TPO_QUICK"],
            },
            indent=1,
        )
    )
    if problems:
        for p in problems:
            log(f"FAILED: {p}")
        return 1
    log("OK: zero warnings, no error outputs, plotly.js and MathJax served locally")
    return 0


if __name__ == "__main__":
    sys.exit(main())
