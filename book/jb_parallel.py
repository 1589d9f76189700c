"""``jupyter-book build`` with its pages executed N at a time (``python -m book.jb_parallel N <jupyter-book args>``).

Jupyter Book v1's command line always builds with one Sphinx process, so the chapters' notebooks run one after
another; the build takes as long as all of them together. Sphinx itself can read (and so execute, in myst-nb)
documents in forked worker processes, and every extension this book uses declares itself parallel-read safe.
This wrapper does four things, then hands over to Jupyter Book's own command line unchanged:

1. passes ``jobs=N`` to ``jupyter_book.sphinx.build_sphinx`` (which accepts it; the command line never sets it);
2. replaces Sphinx's batching of documents (contiguous chunks of up to 10 in name order, so one worker could get
   every long chapter) by one document per task, started slowest first (:data:`SLOWEST_FIRST`), so that N
   workers take the next page as soon as they finish one (longest-processing-time-first scheduling);
3. declares the two extensions Jupyter Book loads that do not say whether they are parallel safe (Sphinx then
   warns and reads serially) safe, as they are:

   - ``sphinx_multitoc_numbering`` 0.1.3 only replaces ``TocTreeCollector.assign_section_numbers``, which runs
     in the main process after the workers' environments are merged (and numbers nothing in this book, whose
     toc is not ``numbered``);
   - ``sphinx_jupyterbook_latex`` 1.0.0 keeps no state in the build environment: its read-time transforms
     annotate each document's own toctree nodes (pickled with that doctree) and the rest acts for LaTeX
     builders only;

   and gives ``sphinx_proof``'s domain (0.2.x, declared safe) the ``merge_domaindata`` that Sphinx requires of
   every domain in a parallel read and that it lacks: it keeps nothing in its domain data (its proofs live in
   ``env.proof_list``, which its own ``env-merge-info`` handler merges), so there is nothing to merge.

Each page still runs in its own fresh kernel exactly as in a serial build; only the order and the overlap
change. Pages do not share state (each glues only its own values), so the output is the same: the HTML of a
serial and a 2-worker build of the same pages differed only in plotly's random figure ids when compared.
"""
from __future__ import annotations

import functools
import pathlib
import sys

# The pages whose execution takes longest in a quick build, slowest first (measured: ch. 8 ≈ 590 s, ch. 6 ≈ 550,
# ch. 3 ≈ 420, ch. 5 ≈ 370, ch. 4 ≈ 200, ch. 7 ≈ 160 on this 2-core host). Pages not listed follow in name
# order. A stale list only makes the schedule less even, never the build wrong.
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


def declared_parallel_safe(setup):
    @functools.wraps(setup)
    def wrapped(app):
        return {**(setup(app) or {}), "parallel_read_safe": True, "parallel_write_safe": True}
    return wrapped


def main(argv: list[str]) -> int:
    if not argv or not argv[0].isdigit() or int(argv[0]) < 1:
        print("book.jb_parallel: the first argument is the number of worker processes (a whole number ≥ 1)",
              file=sys.stderr)
        return 2
    jobs, rest = int(argv[0]), argv[1:]
    import jupyter_book.sphinx
    import sphinx.builders
    from jupyter_book.cli.main import main as jupyter_book_main

    import sphinx_jupyterbook_latex
    import sphinx_proof.domain
    import sphinx_multitoc_numbering

    jupyter_book.sphinx.build_sphinx = functools.partial(jupyter_book.sphinx.build_sphinx, jobs=jobs)
    sphinx.builders.make_chunks = one_per_task
    for ext in (sphinx_multitoc_numbering, sphinx_jupyterbook_latex):
        ext.setup = declared_parallel_safe(ext.setup)
    if "merge_domaindata" not in vars(sphinx_proof.domain.ProofDomain):
        sphinx_proof.domain.ProofDomain.merge_domaindata = lambda self, docnames, otherdata: None
    return jupyter_book_main(args=rest, prog_name="jupyter-book", standalone_mode=False) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
