"""The suite's xdist schedule (tests/schedule.py) does what it says, run with the Makefile's own flags on three
small files: each file on one worker, the longest file (the book's) first in collection and first on its worker."""

from __future__ import annotations

import collections
import os
import re
import shlex
import subprocess
import sys

import pytest

from tests import schedule
from tests.conftest import ROOT

FILES = {  # a book module of four tests and two others whose names sort before and after it
    "test_book.py": "import pytest\n\n@pytest.mark.parametrize('i', range(4))\ndef test_page(i):\n    pass\n",
    "test_aa.py": "def test_one():\n    pass\n\ndef test_two():\n    pass\n",
    "test_zz.py": "def test_one():\n    pass\n\ndef test_two():\n    pass\n",
}
RESULT = re.compile(r"^\[(gw\d+)\] \[ *\d+%\] PASSED (\S+?)::(\S+)", re.M)


def suite_xdist_flags() -> list[str]:
    """The --dist and reorder flags of the Makefile's PYTEST_SUITE (what `make test` runs)."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    line = next(ln for ln in text.splitlines() if ln.startswith("PYTEST_SUITE"))
    words = shlex.split(line.split(":=", 1)[1])
    flags = [w for w in words if w == "--no-loadscope-reorder"]
    if "--dist" in words:
        flags += ["--dist", words[words.index("--dist") + 1]]
    return flags


@pytest.fixture
def three_files(tmp_path):
    (tmp_path / "conftest.py").write_text('pytest_plugins = ("tests.schedule",)\n')
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def _pytest(where, *args) -> str:
    # only xdist, not every installed plugin (their imports are most of a small run's time)
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    env.pop("PYTEST_XDIST_WORKER", None)
    cmd = [sys.executable, "-m", "pytest", "-p", "xdist", "-p", "no:cacheprovider", "--rootdir", str(where), *args]
    proc = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_the_suite_distributes_whole_files_and_no_private_scheduler():
    assert suite_xdist_flags() == ["--no-loadscope-reorder", "--dist", "loadfile"]
    assert "test_book" == schedule.SLOWEST_FIRST[0]
    assert (
        not (ROOT / "tests" / "test_book_build.py").exists() and not (ROOT / "tests" / "test_book_browser.py").exists()
    )
    conftest = (ROOT / "tests" / "conftest.py").read_text()
    assert "pytest_xdist_make_scheduler" not in conftest and "_split_scope" not in conftest


def test_collection_puts_the_listed_files_first_and_keeps_each_file_in_order(three_files):
    out = _pytest(three_files, "-n", "0", "--collect-only", "-q")
    ids = [ln for ln in out.splitlines() if "::" in ln]
    assert ids == [f"test_book.py::test_page[{i}]" for i in range(4)] + [
        "test_aa.py::test_one",
        "test_aa.py::test_two",
        "test_zz.py::test_one",
        "test_zz.py::test_two",
    ]


def test_two_workers_run_each_file_whole_and_the_book_first_on_its_worker(three_files):
    out = _pytest(three_files, "-n", "2", "-v", *suite_xdist_flags())
    ran = collections.defaultdict(list)  # worker -> (file, test) in the order it ran them
    for worker, file, test in RESULT.findall(out):
        ran[worker].append((file, test))
    assert sum(map(len, ran.values())) == 8, out
    workers_of = collections.defaultdict(set)
    for worker, tests in ran.items():
        for file, _ in tests:
            workers_of[file].add(worker)
    assert all(len(w) == 1 for w in workers_of.values()), dict(workers_of)  # every file is one unit of work
    (book_worker,) = workers_of["test_book.py"]
    assert ran[book_worker][:4] == [("test_book.py", f"test_page[{i}]") for i in range(4)]
    print({w: [f"{f}::{t}" for f, t in tests] for w, tests in sorted(ran.items())})
