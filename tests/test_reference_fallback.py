"""Offline, the Table 3 comparison with the reference curves falls back to the one committed with the results
(results/table3_paper_h10/summary.json), never to "unavailable" (review defect 17)."""

from __future__ import annotations

import json
import os
import pathlib
import urllib.request

import jupytext
import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

from tpo_core.lab.reproduce import committed, reference

ROOT = pathlib.Path(__file__).resolve().parents[1]
H10 = ROOT / "results" / "table3_paper_h10"
SHARED_REFERENCE = ROOT.parent / "shared" / "reference" / reference.NAME


@pytest.fixture
def no_reference(tmp_path, monkeypatch):
    """TPO_REFERENCE_NPZ points nowhere, the cache is empty and the network is unreachable."""
    monkeypatch.setenv("TPO_REFERENCE_NPZ", str(tmp_path / "nowhere" / reference.NAME))
    monkeypatch.setenv("TPO_CACHE_DIR", str(tmp_path / "cache"))
    tried = []

    def no_network(url, *args, **kwargs):
        tried.append(url)
        raise OSError("offline (test)")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    return tried


def _ours():
    if not (H10 / "summary.json").exists():
        pytest.skip("no committed results/table3_paper_h10")
    runs = committed.load_runs(H10)
    return {m: runs[f"{m}_H_10_P"].curves["error"] for m in ("tpo", "grpo") if f"{m}_H_10_P" in runs}


def test_offline_the_reference_file_is_not_found_and_nothing_is_written(no_reference, tmp_path, capsys):
    assert reference.reference_path() is None
    assert no_reference == [reference.URL]  # one download attempt, which failed
    assert "unavailable offline" in capsys.readouterr().err
    assert not (tmp_path / "cache" / "reference").exists()


def test_the_committed_comparison_stands_in_and_says_where_it_came_from(no_reference):
    ours = _ours()
    block = json.loads((H10 / "summary.json").read_text())["reference"]
    cmp = reference.committed_comparison(H10, ours)
    assert cmp is not None and "table3_paper_h10/summary.json" in cmp["source"]
    for m, d in cmp["methods"].items():
        ref = np.asarray(d["per_seed_final_ref"])
        assert len(ref) == d["n_ref"] == 20
        assert d["final_ref"] == pytest.approx(ref.mean())  # closed forms, here
        assert d["final_ref_se"] == pytest.approx(ref.std(ddof=1) / np.sqrt(len(ref)))
        if m in ours and len(ours[m]) == block["methods"][m]["n_ours"]:
            assert d == block["methods"][m]  # the saved comparison, unchanged
        assert d["final_test"]["verdict"] in ("consistent", "inconsistent", "inconclusive")


def test_with_other_seed_counts_the_final_error_test_is_recomputed_from_the_saved_reference_finals(no_reference):
    ours = {m: c[:4] for m, c in _ours().items()}
    cmp = reference.committed_comparison(H10, ours)
    assert sorted(cmp["recomputed"]) == sorted(ours) and "recomputed" in cmp["source"]
    for m, c in ours.items():
        d = cmp["methods"][m]
        final_o, final_r = 100 * c[:, -1], np.asarray(d["per_seed_final_ref"])
        assert d["n_ours"] == 4 and d["final_ours"] == pytest.approx(final_o.mean())
        t = d["final_test"]
        assert t["diff"] == pytest.approx(final_o.mean() - final_r.mean())
        assert t["ci"][0] <= t["diff"] <= t["ci"][1]
        assert "steps_test" not in d and "checkpoints" not in d  # those need the reference curves


@pytest.mark.skipif(not SHARED_REFERENCE.exists(), reason="needs the reference file beside the repository")
def test_the_committed_comparison_is_what_the_reference_file_gives():
    ours = _ours()
    block = json.loads((H10 / "summary.json").read_text())["reference"]
    live = reference.compare_reference(ours, SHARED_REFERENCE)
    for m, d in live["methods"].items():
        if len(ours[m]) != block["methods"][m]["n_ours"]:
            continue
        saved = block["methods"][m]
        assert d["per_seed_final_ref"] == pytest.approx(saved["per_seed_final_ref"])
        assert d["final_test"]["diff"] == pytest.approx(saved["final_test"]["diff"])
        assert d["final_test"]["verdict"] == saved["final_test"]["verdict"]


@pytest.mark.slow
def test_the_reproduction_page_offline_reads_the_committed_comparison(no_reference, monkeypatch):
    """Execute the page's cells up to its seed-by-seed section with no reference file anywhere."""
    _ours()
    nb = jupytext.read(ROOT / "book" / "reproduction.md")
    cells = [c for c in nb.cells if c.cell_type == "code" and "google.colab" not in c.source]
    last = next(i for i, c in enumerate(cells) if "seedwise.h10_comparison" in c.source)
    nb.cells = cells[: last + 1]
    env_cell = (
        "import os, urllib.request\n"
        "def _offline(*a, **k):\n    raise OSError('offline (test)')\n"
        "urllib.request.urlopen = _offline\n"
    )
    nb.cells.insert(0, nbformat.v4.new_code_cell(env_cell))
    monkeypatch.chdir(ROOT / "book")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))  # this tpo_core
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "book")}}
    ).execute()
    streams = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "stream"]
    stdout = "\n".join(o["text"] for o in streams if o["name"] == "stdout")
    assert "summary.json" in stdout and "unavailable" not in stdout and "not computed" not in stdout
    stderr = "\n".join(o["text"] for o in streams if o["name"] == "stderr")
    assert "skipped" not in stderr and "unavailable" not in stderr
    glued = {
        o["metadata"]["scrapbook"]["name"]: next(v for k, v in o["data"].items() if k.endswith("text/plain"))
        for c in nb.cells
        for o in c.get("outputs", [])
        if o.get("metadata", {}).get("scrapbook")
    }
    assert glued["h10_verdict_tpo"].strip("'") in ("consistent", "inconsistent", "inconclusive")
    assert "summary.json" in glued["h10_ref_source"] and "summary.json" in glued["sw_source"]
    for name, text in glued.items():
        assert "not computed" not in text and "unavailable" not in text, (name, text)
