"""The shape of the import graph of ``tpo_core``, ``demos``, ``benchmarks`` and ``book``, measured with grimp.

    python -m benchmarks.architecture            # print, and write benchmarks/results/architecture.json
                                                 # (with benchmarks.record's header; benchmarks/report.py renders it)
    python -m benchmarks.architecture --readme   # also rewrite the README's architecture table from that file

Every import a file makes counts, at module level or inside a function (grimp reads them all). The words:

* **layer**: the library (``tpo_core`` but its ``lab`` and ``__main__``), the lab (``tpo_core.lab``),
  ``tpo_core.__main__``, ``demos``, ``benchmarks``, ``book``;
* **room**: a module or subpackage directly under its layer's package (``tpo_core.losses``, ``tpo_core.bridge``,
  ``tpo_core.lab.reproduce``, ``tpo_core.lab.figures``, …); ``tpo_core.__main__``, ``demos``, ``benchmarks`` and
  ``book`` are one room each;
* **floors**: the number of nodes on the longest import path (a node that imports nothing of the project is on
  floor 1), between layers, between rooms, and between the modules inside the library and inside the lab;
* **upward import**: a module importing one of a layer the declared layers put above its own (ranks: library 1,
  lab 2, ``__main__`` and ``demos`` 3, ``benchmarks`` 4; ``book`` apart, importing and imported by nothing);
* **circle**: a strongly connected group of two or more modules (or of rooms) importing each other;
* **lines**: non-blank lines of the ``.py`` files of the library (the torch bridge counted apart) and of the lab.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re

import grimp

from benchmarks import record
from tpo_core.lab import atomic_io

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "architecture.json"
README = ROOT / "README.md"
BEGIN, END = "<!-- architecture: begin (python -m benchmarks.architecture --readme) -->", "<!-- architecture: end -->"
PACKAGES = ("tpo_core", "demos", "benchmarks", "book")
RANK = {"library": 1, "lab": 2, "__main__": 3, "demos": 3, "benchmarks": 4}  # book: apart


def layer(module: str) -> str:
    top, *rest = module.split(".")
    if top != "tpo_core":
        return top
    if rest[:1] == ["lab"]:
        return "lab"
    return "__main__" if rest[:1] == ["__main__"] else "library"


def room(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "tpo_core" or parts[1:2] == ["__main__"]:
        return parts[0] if parts[0] != "tpo_core" else "tpo_core.__main__"
    depth = 3 if parts[1:2] == ["lab"] else 2
    return ".".join(parts[:depth])


def edges(graph) -> set[tuple[str, str]]:
    return {(a, b) for a in graph.modules for b in graph.find_modules_directly_imported_by(a) if a != b}


def components(nodes, arrows) -> list[list[str]]:
    """Strongly connected components (Tarjan), each sorted; in reverse topological order."""
    out_of = {n: sorted({b for a, b in arrows if a == n}) for n in nodes}
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v), on.add(v)
        for w in out_of[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            found.append(sorted(group))

    for n in sorted(nodes):
        if n not in index:
            visit(n)
    return found


def floors(nodes, arrows) -> int:
    """Nodes on the longest import path, a circle counted as one node (0 for no nodes)."""
    groups = components(nodes, arrows)
    where = {n: i for i, g in enumerate(groups) for n in g}
    depth = {}
    for i in range(len(groups)):  # reverse topological: what a group imports comes first
        below = [depth[where[b]] for a, b in arrows if where.get(a) == i and where.get(b) != i and b in where]
        depth[i] = 1 + max(below, default=0)
    return max(depth.values(), default=0)


def lines(paths) -> int:
    return sum(sum(1 for line in p.read_text().splitlines() if line.strip()) for p in paths)


def measure() -> dict:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    arrows = edges(graph)
    modules = set(graph.modules)
    layer_arrows = {(layer(a), layer(b)) for a, b in arrows if layer(a) != layer(b)}
    room_arrows = {(room(a), room(b)) for a, b in arrows if room(a) != room(b)}
    inside = {name: {m for m in modules if layer(m) == name} for name in ("library", "lab")}
    upward = sorted(
        f"{a} -> {b}"
        for a, b in arrows
        if layer(a) != layer(b) and ("book" in (layer(a), layer(b)) or RANK[layer(b)] >= RANK[layer(a)])
    )
    module_circles = [g for g in components(modules, arrows) if len(g) > 1]
    rooms = {room(m) for m in modules}
    room_circles = [g for g in components(rooms, room_arrows) if len(g) > 1]
    py = sorted((ROOT / "tpo_core").rglob("*.py"))
    bridge = [p for p in py if p.relative_to(ROOT).parts[1] == "bridge"]
    lab = [p for p in py if p.relative_to(ROOT).parts[1] == "lab"]
    library = [p for p in py if p not in bridge and p not in lab]
    return {
        "floors": {
            "layers": floors({layer(m) for m in modules}, layer_arrows),
            "rooms": floors(rooms, room_arrows),
            "library_modules": floors(inside["library"], {e for e in arrows if set(e) <= inside["library"]}),
            "lab_modules": floors(inside["lab"], {e for e in arrows if set(e) <= inside["lab"]}),
        },
        "upward": upward,
        "circles": {"modules": module_circles, "rooms": room_circles},
        "lines": {"library": lines(library), "bridge": lines(bridge), "lab": lines(lab)},
        "counts": {"modules": len(modules), "imports": len(arrows), "rooms": len(rooms)},
    }


def rows(m: dict) -> list:
    """(measure, value) rows of a measurement (lines rounded to 0.1k, so that they do not change with every edit):
    the README's architecture table, and this file's section of ``benchmarks/results/README.md``."""
    f, c, n = m["floors"], m["circles"], m["lines"]

    def k(x):
        return f"{x / 1000:.1f}k"

    return [
        ("floors between the layers (library, lab, demos, benchmarks)", f"{f['layers']}"),
        ("floors between the rooms (modules and subpackages under each layer)", f"{f['rooms']}"),
        (
            "floors between the modules inside the library / inside the lab",
            f"{f['library_modules']} / {f['lab_modules']}",
        ),
        ("upward imports", f"{len(m['upward'])}"),
        ("circles between modules / between rooms", f"{len(c['modules'])} / {len(c['rooms'])}"),
        ("non-blank lines: library + bridge / lab", f"{k(n['library'])} + {k(n['bridge'])} / {k(n['lab'])}"),
    ]


def table(m: dict) -> str:
    """The README's architecture table, from a measurement."""
    return "\n".join(["| measure | value |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows(m)])


def _block(text: str) -> re.Match:
    match = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    if match is None:
        raise ValueError(f"README.md has no {BEGIN!r} … {END!r} block")
    return match


def readme_block(text: str) -> str:
    """The table between the README's markers (ValueError when the markers are missing)."""
    return _block(text).group(1).strip("\n")


def write_readme(m: dict, path: pathlib.Path = README) -> None:
    text = path.read_text()
    span = _block(text).span()
    atomic_io.write_text(path, text[: span[0]] + f"{BEGIN}\n{table(m)}\n{END}" + text[span[1] :])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.architecture", description=__doc__.split("\n")[0])
    ap.add_argument("--readme", action="store_true", help="rewrite the README's architecture table from the file")
    args = ap.parse_args(argv)
    m = dict(
        record.header(
            record.command_line("architecture", argv, module=True),
            note="a measurement of the source tree: the host's load does not change it",
        ),
        **measure(),
    )
    record.write("architecture", record.finish(m), OUT)
    print(json.dumps(m, indent=1))
    print(table(m))
    if args.readme:
        write_readme(json.loads(OUT.read_text()))
        print(f"rewrote the architecture table of {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
