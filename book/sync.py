"""Keep every MyST chapter ``book/*.md`` paired with a committed, output-free ``.ipynb`` for Colab.

The ``.md`` is the source of truth (it is what the book builds); the ``.ipynb`` beside it is what
the Colab launch button opens, so it carries Colab's GPU metadata.

    python -m book.sync            # (re)write every pair
    python -m book.sync --check    # exit 1 and list the stale pairs (what the tests run)

A pair is *in sync* when the two files hold the same cells (type, source and tags, compared after
a jupytext round trip) and the notebook has the Colab metadata and no outputs.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import jupytext

BOOK = pathlib.Path(__file__).resolve().parent
ROOT = BOOK.parent

KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
COLAB_METADATA = {
    "accelerator": "GPU",
    "colab": {"gpuType": "T4", "provenance": []},
    "kernelspec": KERNELSPEC,
    "language_info": {"name": "python"},
}


def is_notebook_source(md_path: pathlib.Path) -> bool:
    """True for a MyST notebook: a ``.md`` whose jupytext header says ``format_name: myst``."""
    text = md_path.read_text(encoding="utf-8")
    if not text.startswith("---"):
        return False
    header = text.split("---", 2)[1] if text.count("---") >= 2 else ""
    return "format_name: myst" in header and "kernelspec" in header


def sources(book_dir: pathlib.Path | None = None) -> list[pathlib.Path]:
    """Every MyST notebook of the book folder, sorted."""
    book_dir = BOOK if book_dir is None else pathlib.Path(book_dir)
    return sorted(p for p in book_dir.glob("*.md") if is_notebook_source(p))


def _cells(nb) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.cell_type, c.source.strip(), tuple(c.get("metadata", {}).get("tags", []))) for c in nb.cells]


def to_ipynb(md_path: pathlib.Path):
    """The Colab notebook for one chapter: its cells, no outputs, Colab GPU metadata."""
    nb = jupytext.read(md_path)
    nb.metadata = json.loads(json.dumps(COLAB_METADATA))
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:03d}"  # deterministic ids: re-syncing an unchanged chapter changes nothing
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("lines_to_next_cell", None)
    return nb


def write_pair(md_path: pathlib.Path) -> pathlib.Path:
    out = md_path.with_suffix(".ipynb")
    text = jupytext.writes(to_ipynb(md_path), fmt="ipynb")
    if not out.exists() or out.read_text(encoding="utf-8") != text:
        out.write_text(text, encoding="utf-8")
    return out


def problems(md_path: pathlib.Path) -> list[str]:
    """Why one pair is stale (empty when in sync)."""
    nb_path = md_path.with_suffix(".ipynb")
    if not nb_path.exists():
        return [f"{nb_path.name} is missing"]
    try:
        nb = jupytext.read(nb_path)
    except Exception as exc:  # noqa: BLE001 - a broken notebook is a stale pair
        return [f"{nb_path.name} cannot be read: {exc}"]
    found = []
    want, have = _cells(jupytext.read(md_path)), _cells(nb)
    if want != have:
        n = next((i for i, (a, b) in enumerate(zip(want, have)) if a != b), min(len(want), len(have)))
        found.append(f"cells differ from {md_path.name} (first difference at cell {n}; "
                     f"{len(want)} cells in .md, {len(have)} in .ipynb)")
    meta = nb.metadata
    if meta.get("accelerator") != "GPU" or meta.get("colab", {}).get("gpuType") != "T4":
        found.append("missing Colab GPU metadata (accelerator: GPU, colab.gpuType: T4)")
    if meta.get("kernelspec", {}).get("name") != "python3":
        found.append("kernelspec is not python3")
    if any(c.cell_type == "code" and c.get("outputs") for c in nb.cells):
        found.append("has outputs (commit it stripped)")
    return found


def check(book_dir: pathlib.Path | None = None) -> dict[str, list[str]]:
    """{file name: problems} for every stale pair, plus notebooks whose .md is gone."""
    book_dir = BOOK if book_dir is None else pathlib.Path(book_dir)
    stale = {md.name: p for md in sources(book_dir) if (p := problems(md))}
    for nb_path in sorted(book_dir.glob("*.ipynb")):
        if not nb_path.with_suffix(".md").exists():
            stale[nb_path.name] = ["no .md source beside it (delete the notebook)"]
    return stale


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m book.sync", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 listing the stale pairs")
    parser.add_argument("--book-dir", type=pathlib.Path, default=BOOK, help="folder of the chapters (default: book/)")
    args = parser.parse_args(argv)
    if not args.book_dir.is_dir():
        parser.error(f"--book-dir: {args.book_dir} is not a folder")
    if args.check:
        stale = check(args.book_dir)
        for name, why in stale.items():
            print(f"stale: {name}: {'; '.join(why)}")
        if stale:
            print("run `python -m book.sync` to regenerate the notebooks", file=sys.stderr)
            return 1
        print(f"{len(sources(args.book_dir))} pairs in sync")
        return 0
    for md in sources(args.book_dir):
        print(write_pair(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
