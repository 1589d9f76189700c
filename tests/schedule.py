"""The suite's schedule under pytest-xdist, through its public options and hooks only (a pytest plugin, loaded by
``pytest_plugins`` in tests/conftest.py).

``make test`` runs ``pytest -n auto --dist loadfile --no-loadscope-reorder`` (the Makefile's ``PYTEST_SUITE``):

- ``--dist loadfile``: a test file is one unit of work, so one worker runs a whole file and its module fixtures
  (a served demo, the built book) start once. The book's build and its Chromium pass are one module,
  tests/test_book.py, so they are one unit: the pass reads the build that the same worker made.
- ``--no-loadscope-reorder``: xdist queues the files in collection order instead of by their number of tests, and
  :func:`pytest_collection_modifyitems` makes that order the files of :data:`SLOWEST_FIRST` first, then the rest in
  pytest's own order. So the longest file starts at once and the others fill the other workers beside it
  (longest-processing-time-first scheduling).
- ``-n auto``: :func:`pytest_xdist_auto_num_workers`.

``--dist loadgroup`` with ``xdist_group`` marks would name the same groups, but with pytest 9.2 it silently stops
grouping (the tests run as if unmarked: https://github.com/pytest-dev/pytest-xdist/issues/1386); one module needs no
mark.
"""

from __future__ import annotations

import os

import pytest

# Test files by their duration in `make test`, longest first (the --durations report of a run on 2 cores). A stale
# order only makes the workers' loads less even, never a result wrong.
SLOWEST_FIRST = ("test_book", "test_reproduce", "test_train", "test_colab", "test_bridge_torch_ops", "test_bridge_trl")


def pytest_collection_modifyitems(config, items):
    """The files of SLOWEST_FIRST first, in that order; every other file after them, in collection order. The sort
    is stable, so each file's tests stay together and in their own order."""
    rank = {stem: i for i, stem in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda it: rank.get(it.path.stem, len(rank)))


@pytest.hookimpl(optionalhook=True)  # an xdist hook: a run without xdist (`-p no:xdist`) never calls it
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: two workers on a 2-core machine (the book's unit beside the rest), one per core up to four."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    return max(2, min(4, cores))
