"""Keep every MyST chapter ``book/*.md`` paired with a committed, output-free ``.ipynb`` for Colab.

The ``.md`` is the source of truth (it is what the book builds); the ``.ipynb`` beside it is what
the Colab launch button opens, so it carries Colab's GPU metadata.

    python -m book.sync            # (re)write every pair
    python -m book.sync --check    # exit 1 and list the stale pairs (what the tests run)

A pair is *in sync* when the notebook holds exactly the cells :func:`to_ipynb` makes from the
chapter (type, source and tags, compared after a jupytext round trip), has the Colab metadata and no
outputs, and its markdown has no MyST syntax left.

What the notebook changes, so that Colab (which renders plain Markdown only) shows no raw fences:

- MyST directives become plain Markdown: admonitions (```{note}``, ```{admonition} Title``) a
  block quote with a bold title; ``prf:`` blocks (algorithm, proposition, proof) a bold heading and
  their body; ``exercise-start``/``exercise-end`` a bold "Exercise" line; ``solution-start`` a bold
  "Solution" line, and the solution's code cells are collapsed (Colab ``cellView: form``);
- roles: ``{cite}`` becomes "(Author Year)" from ``references.bib``, ``{ref}`` the label's text or
  the heading it labels, ``{glue:text}`name``` "``name`` (printed above)" (Colab has no glue: the cell
  above prints the value); target lines ``(label)=`` are dropped.

The install cell's repository: ``_config.yml``'s ``repository.url@branch`` is the one place the URL is
kept. ``python -m book.sync`` copies it into the line ``REPOSITORY = "..."`` of every chapter's install
cell, in the ``.md`` itself (so the book's rendered input shows the real URL) and so in the notebook;
``--check`` reports a chapter whose line differs from ``_config.yml``.
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import re
import sys

import jupytext
import yaml

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


# --------------------------------------------------------------------------------------------
# MyST -> plain Markdown (for Colab)
# --------------------------------------------------------------------------------------------
ADMONITIONS = ("note", "tip", "hint", "important", "warning", "caution", "attention", "danger", "error", "seealso")
# any MyST construct that Colab would show raw (what --check looks for in the notebook's markdown)
MYST_LEFT = re.compile(r"^\s*(```|~~~|:::)\s*\{[\w:-]+\}|\{[\w:-]+\}`|^\([\w:-]+\)=\s*$", re.M)
_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,}|:{3,})\s*\{(?P<name>[\w:-]+)\}[ \t]*(?P<arg>.*)$")
_ROLE = re.compile(r"\{(?P<name>[\w:-]+)\}`(?P<body>[^`]*)`")


def config(root: pathlib.Path | None = None) -> dict:
    return yaml.safe_load(((ROOT if root is None else root) / "_config.yml").read_text(encoding="utf-8"))


def repository(root: pathlib.Path | None = None) -> str:
    """``url@branch`` of the book's repository, as ``_config.yml`` states it (the one copy)."""
    repo = config(root)["repository"]
    return f"{repo['url']}@{repo.get('branch', 'main')}"


@functools.lru_cache(maxsize=None)
def _bib(path: str) -> dict[str, str]:
    """{key: "Author Year"} from a BibTeX file (first author's surname, "et al." for more)."""
    out = {}
    text = pathlib.Path(path).read_text(encoding="utf-8") if pathlib.Path(path).exists() else ""
    for m in re.finditer(r"@\w+\{([^,\s]+),(.*?)\n\}", text, re.S):
        key, body = m.group(1), m.group(2)
        author = re.search(r"author\s*=\s*[{\"](.+?)[}\"],?\s*\n", body, re.S)
        year = re.search(r"year\s*=\s*[{\"]?(\d{4})", body)
        names = [n.strip() for n in author.group(1).replace("\n", " ").split(" and ")] if author else []
        first = names[0] if names else key
        surname = first.split(",")[0].strip() if "," in first else first.split()[-1]
        surname = surname.strip("{}")
        who = surname + (
            " et al."
            if len(names) > 2
            else f" and {names[1].split(',')[0].split()[-1]}"
            if len(names) == 2 and "," not in names[1]
            else (f" and {names[1].split(',')[0].strip()}" if len(names) == 2 else "")
        )
        out[key] = f"{who} {year.group(1)}" if year else who
    return out


@functools.lru_cache(maxsize=None)
def _labels(book_dir: str) -> dict[str, str]:
    """{label: text} for every ``(label)=`` target of the book: the heading or directive title below it."""
    out = {}
    for md in pathlib.Path(book_dir).glob("*.md"):
        lines = md.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"^\(([\w:-]+)\)=\s*$", line)
            if not m:
                continue
            nxt = next((x for x in lines[i + 1 :] if x.strip()), "")
            head = re.match(r"^#+\s+(.*)$", nxt)
            fence = _FENCE.match(nxt)
            out[m.group(1)] = head.group(1) if head else (fence.group("arg").strip() if fence else m.group(1))
    return out


def _role(m: re.Match, book_dir: pathlib.Path) -> str:
    name, body = m.group("name"), m.group("body")
    if name.startswith("cite"):
        bib = _bib(str(book_dir / "references.bib"))
        refs = "; ".join(bib.get(k.strip(), k.strip()) for k in body.split(","))
        return refs if name == "cite:t" else f"({refs})"
    if name in ("ref", "numref", "doc", "eq", "term"):
        explicit = re.match(r"^(.*?)\s*<([^>]+)>$", body)
        if explicit:
            return explicit.group(1)
        return _labels(str(book_dir)).get(body, body)
    if name.startswith("glue"):
        return f"`{body.split(':')[0]}` (printed above)"
    if name == "math":
        return f"${body}$"
    return body


def _title(name: str, arg: str) -> str:
    if name == "admonition":
        return arg or "Note"
    if name.startswith("prf:"):
        kind = name[4:].capitalize()
        return f"{kind}: {arg}" if arg else kind
    return name.capitalize() + (f": {arg}" if arg else "")


def plain_markdown(text: str, book_dir: pathlib.Path | None = None) -> str:
    """One markdown cell of a MyST chapter as plain Markdown (module docstring)."""
    book_dir = BOOK if book_dir is None else pathlib.Path(book_dir)
    out, stack = [], []  # stack: (fence, quote?) of the directives we are inside
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        quote = "> " if any(q for _, q in stack) else ""
        m = _FENCE.match(line.strip())
        if m:
            name, arg = m.group("name"), m.group("arg").strip()
            i += 1
            while i < len(lines) and re.match(r"^\s*:[\w-]+:", lines[i]):  # directive options
                i += 1
            if name in ("exercise-end", "solution-end"):
                close = m.group("fence")
                while i < len(lines) and lines[i].strip() != close:
                    i += 1
                i += 1
                continue
            if name == "exercise-start":
                out.append(quote + "**Exercise.**")
            elif name == "solution-start":
                out.append(quote + "**Solution** (the code cells below; in Colab, click to show them).")
            elif name == "bibliography":
                out.append(quote + "*(The bibliography is on the book's References page.)*")
            elif name in ADMONITIONS or name == "admonition":
                out.append(quote + f"> **{_title(name, arg)}**")
                out.append(quote + ">")
                while i < len(lines) and not lines[i].strip():  # the body's leading blank lines
                    i += 1
                stack.append((m.group("fence"), True))
                continue
            else:
                out.append(quote + f"**{_title(name, arg)}**")
                out.append(quote)
                stack.append((m.group("fence"), False))
                continue
            # single-line directives (exercise/solution markers): skip to their closing fence
            close = m.group("fence")
            while i < len(lines) and lines[i].strip() != close:
                i += 1
            i += 1
            continue
        if stack and line.strip() == stack[-1][0]:
            stack.pop()
            i += 1
            continue
        if re.match(r"^\([\w:-]+\)=\s*$", line):
            i += 1
            continue
        line = _ROLE.sub(lambda r: _role(r, book_dir), line)
        out.append((quote + line) if quote and line.strip() else (quote.rstrip() if quote else line))
        i += 1
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n")


REPOSITORY_LINE = re.compile(r'^(\s*REPOSITORY\s*=\s*)"([^"]*)"', re.M)
# a MyST code cell: its opening fence line, its body, its closing fence
_CODE_CELL = re.compile(r"^(?P<open>```\{code-cell\}[^\n]*\n)(?P<body>.*?)(?P<close>^```[ \t]*$)", re.M | re.S)


def _install_cell(source: str, repo: str) -> str:
    return REPOSITORY_LINE.sub(lambda m: f'{m.group(1)}"{repo}"', source)


def _is_install_source(source: str) -> bool:
    return "google.colab" in source and "pip" in source


def is_install_cell(cell) -> bool:
    return cell.cell_type == "code" and _is_install_source(cell.source)


def install_repositories(text: str) -> list[str]:
    """The ``REPOSITORY = "..."`` values of the install cells in a MyST chapter's text."""
    return [
        m.group(2)
        for c in _CODE_CELL.finditer(text)
        if _is_install_source(c.group("body"))
        for m in REPOSITORY_LINE.finditer(c.group("body"))
    ]


def with_repository(text: str, repo: str) -> str:
    """A MyST chapter's text with every install cell's ``REPOSITORY`` line set to ``repo`` (nothing else changed)."""

    def cell(c: re.Match) -> str:
        body = c.group("body")
        if not _is_install_source(body):
            return c.group(0)
        return c.group("open") + _install_cell(body, repo) + c.group("close")

    return _CODE_CELL.sub(cell, text)


def write_source(md_path: pathlib.Path) -> bool:
    """Copy ``_config.yml``'s repository into the chapter's install cell; True when the ``.md`` changed."""
    md_path = pathlib.Path(md_path)
    root = md_path.resolve().parent.parent
    if not (root / "_config.yml").exists():
        return False
    text = md_path.read_text(encoding="utf-8")
    new = with_repository(text, repository(root))
    if new != text:
        md_path.write_text(new, encoding="utf-8")
    return new != text


def to_ipynb(md_path: pathlib.Path):
    """The Colab notebook for one chapter: its cells (markdown made plain, the install cell given the
    repository), no outputs, Colab GPU metadata; solution code cells collapsed."""
    md_path = pathlib.Path(md_path)
    nb = jupytext.read(md_path)
    nb.metadata = json.loads(json.dumps(COLAB_METADATA))
    root = md_path.resolve().parent.parent
    repo = repository(root) if (root / "_config.yml").exists() else None
    in_solution = False
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:03d}"  # deterministic ids: re-syncing an unchanged chapter changes nothing
        cell.metadata.pop("lines_to_next_cell", None)
        if cell.cell_type == "markdown":
            markers = re.findall(r"\{solution-(start|end)\}", cell.source)
            if markers:  # the last marker of the cell decides (end + next start)
                in_solution = markers[-1] == "start"
            cell.source = plain_markdown(cell.source, md_path.parent)
        elif cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            if repo and is_install_cell(cell):
                cell.source = _install_cell(cell.source, repo)
            if in_solution:
                cell.metadata["cellView"] = "form"  # Colab: code hidden behind "Show code"
                cell.metadata["jupyter"] = {"source_hidden": True}  # Jupyter: collapsed input
    # a markdown cell left empty by the conversion (only a label or an end fence) is dropped
    nb.cells = [c for c in nb.cells if c.cell_type != "markdown" or c.source.strip()]
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:03d}"
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
    except Exception as exc:  # a broken notebook is a stale pair
        return [f"{nb_path.name} cannot be read: {exc}"]
    found = []
    root = md_path.resolve().parent.parent
    if (root / "_config.yml").exists():
        repo = repository(root)
        stale = [r for r in install_repositories(md_path.read_text(encoding="utf-8")) if r != repo]
        if stale:
            found.append(f"the install cell's REPOSITORY is {stale[0]!r}, not _config.yml's {repo!r}")
    want, have = _cells(to_ipynb(md_path)), _cells(nb)
    if want != have:
        n = next((i for i, (a, b) in enumerate(zip(want, have)) if a != b), min(len(want), len(have)))
        found.append(
            f"cells differ from {md_path.name} (first difference at cell {n}; "
            f"{len(want)} cells from the .md, {len(have)} in .ipynb)"
        )
    raw = [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and MYST_LEFT.search(c.source)]
    if raw:
        found.append(f"MyST syntax left in markdown cells {raw} (Colab would show it raw)")
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
        if write_source(md):
            print(f"{md}: install cell's REPOSITORY set from _config.yml")
        print(write_pair(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
