"""Sphinx's parallel build of the book, its pages executed N at a time (``python -m book.jb_parallel N <sphinx-build
arguments>``), and the small Sphinx extension the book's configuration loads for it (``sphinx: local_extensions`` in
``_config.yml``).

Jupyter Book v1's command line always builds with one Sphinx process, so the chapters' notebooks would run one after
another (it has no ``-j``: https://github.com/jupyter-book/jupyter-book/issues/1735). Its documented way to use
Sphinx's own options is to build with Sphinx: ``jupyter-book config sphinx .`` writes the book's configuration as a
``conf.py``, and ``sphinx-build -j N`` reads documents (and so, in myst-nb, executes notebooks) in N forked worker
processes. ``python -m book.build`` does both (it writes the ``conf.py`` for the build and removes it after).
What the parallel read needs beyond that, and how:

1. every extension must declare itself parallel safe, or Sphinx warns and reads serially. All of this book's do, but
   for two that Jupyter Book adds:

   - ``sphinx_jupyterbook_latex`` acts for LaTeX builds only, and the book builds HTML: ``_config.yml`` turns it
     off (``latex.use_jupyterbook_latex: false``), Jupyter Book's own setting;
   - ``sphinx_multitoc_numbering`` 0.1.3 cannot be turned off (sphinx_external_toc 1.1.0 loads it whatever the
     configuration says: https://github.com/executablebooks/sphinx-external-toc/issues/115) and Sphinx has no
     option to declare another extension's safety, so :func:`setup` marks its record in ``app.extensions`` (the
     one patch of Sphinx's state here; open upstream:
     https://github.com/executablebooks/sphinx-multitoc-numbering/issues/27). It is safe: it only replaces
     ``TocTreeCollector.assign_section_numbers``, which runs in the main process after the workers' environments
     are merged (and numbers nothing in this book, whose toc is not ``numbered``);
2. every domain must merge the data of the workers' environments (``Domain.merge_domaindata``); sphinx_proof's
   domain does not implement it. :func:`setup` registers a subclass that does, through Sphinx's public
   ``app.add_domain(..., override=True)``: sphinx_proof keeps nothing in its domain data (its proofs live in
   ``env.proof_list``, which its own ``env-merge-info`` handler merges), so there is nothing to merge;
3. Sphinx cuts the documents into contiguous chunks of up to 10 in name order, one chunk per worker task, so one
   worker can get every long chapter, and there is no option to change that (open upstream:
   https://github.com/sphinx-doc/sphinx/issues/6330, a queue for parallel reads). This is the other patch:
   :func:`main` replaces ``sphinx.builders.make_chunks`` by :func:`one_per_task`, one document per task, started
   slowest first (:data:`SLOWEST_FIRST`), so that each worker takes the next page as soon as it finishes one
   (longest-processing-time-first scheduling). tests/test_book_sync.py runs it through Sphinx's own
   ``ParallelTasks``, so a Sphinx that schedules tasks differently fails there, not silently.

Each page still runs in its own fresh kernel exactly as in a serial build; only the order and the overlap change.
Pages do not share state (each glues only its own values), so the output is the same as ``jupyter-book build``'s
(``python -m book.build --jobs 1``): the HTML of the two differs only in plotly's random figure ids.
"""

from __future__ import annotations

import pathlib
import sys

# The pages whose execution takes longest in a quick build, slowest first: the order of the "executed <page> in N s"
# lines that `python -m book.build` logs (also `executed_s` in _build/tpo_build.json). Pages not listed follow in
# name order. A stale list only makes the schedule less even, never the build wrong.
SLOWEST_FIRST = ("08_", "06_", "03_", "05_", "04_", "07_", "03c_", "03b_", "11_", "09_", "10_", "cheatsheet")


def rank(docname: str) -> tuple[int, str]:
    name = pathlib.PurePath(docname).name
    for i, prefix in enumerate(SLOWEST_FIRST):
        if name.startswith(prefix):
            return i, docname
    return len(SLOWEST_FIRST), docname


def one_per_task(arguments, nproc, maxbatch=10):  # the signature of sphinx.util.parallel.make_chunks
    """One document per worker task, so that Sphinx starts them slowest first.

    Sphinx adds every task before any finishes; ``ParallelTasks`` starts the first ``nproc`` at once and then,
    each time a worker is free, the task added *last* (``dict.popitem``). So the list is the first ``nproc``
    pages of the wanted order followed by the rest of it reversed."""
    wanted = [[d] for d in sorted(arguments, key=rank)]
    return wanted[:nproc] + wanted[nproc:][::-1]


def setup(app):
    """The Sphinx extension (``sphinx: local_extensions`` in _config.yml): what a parallel read needs of the others."""
    from sphinx_proof.domain import ProofDomain

    app.setup_extension("sphinx_proof")
    app.setup_extension("sphinx_multitoc_numbering")
    multitoc = app.extensions["sphinx_multitoc_numbering"]
    if multitoc.parallel_read_safe is None:  # undeclared (not: declared unsafe); parallel writing defaults to safe
        multitoc.parallel_read_safe = True

    class MergeableProofDomain(ProofDomain):
        def merge_domaindata(self, docnames, otherdata):
            """Nothing to merge: the proofs live in ``env.proof_list``, merged by sphinx_proof's own handler."""

    if "merge_domaindata" not in vars(ProofDomain):  # a sphinx_proof that merges needs nothing from here
        app.add_domain(MergeableProofDomain, override=True)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main(argv: list[str]) -> int:
    if not argv or not argv[0].isdigit() or int(argv[0]) < 1:
        print(
            "book.jb_parallel: the first argument is the number of worker processes (a whole number ≥ 1)",
            file=sys.stderr,
        )
        return 2
    jobs, rest = int(argv[0]), argv[1:]
    import sphinx.builders
    from sphinx.cmd.build import main as sphinx_build

    sphinx.builders.make_chunks = one_per_task
    return sphinx_build(["--jobs", str(jobs), *rest])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
