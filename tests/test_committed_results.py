"""tpo_core.lab.reproduce.committed: reading committed reproduction runs back (the book's experiment chapters)."""

import json
import pathlib

import numpy as np
import pytest

from tpo_core.lab import atomic_io
from tpo_core.lab.reproduce import committed

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _write(path, curves, seeds, seconds=1.0, config=None, engine=2):
    atomic_io.write_npz(
        path,
        config_hash=np.array("h"),
        info=np.array(json.dumps({"seconds": seconds, "engine": engine})),
        config=np.array(json.dumps(config or {"H": 3})),
        seeds=np.array(seeds),
        **{f"curve_{k}": v for k, v in curves.items()},
    )


def test_per_seed_files_are_concatenated_in_numeric_seed_order(tmp_path):
    folder = tmp_path / "preset"
    for s in (10, 2, 0):  # written out of order; "seed_10" sorts before "seed_2" as text
        _write(folder / "tpo.seeds" / f"seed_{s}.npz", {"error": np.full((1, 4), float(s))}, [s], seconds=s)
    (folder / "tpo.seeds" / "notes.txt").write_text("not a seed file")
    runs = committed.load_runs(folder)
    run = runs["tpo"]
    assert run.seeds == (0, 2, 10)
    np.testing.assert_array_equal(run.curves["error"][:, 0], [0.0, 2.0, 10.0])
    assert run.n_seeds == 3 and run.length == 4 and run.seconds == 12.0


@pytest.mark.parametrize("other", [dict(config={"H": 4}), dict(engine=1)], ids=["config", "engine"])
def test_a_seed_file_of_another_configuration_is_refused(tmp_path, other):
    folder = tmp_path / "preset"
    _write(folder / "tpo.seeds" / "seed_0.npz", {"error": np.zeros((1, 4))}, [0])
    _write(folder / "tpo.seeds" / "seed_1.npz", {"error": np.ones((1, 4))}, [1], **other)
    with pytest.raises(ValueError, match=r"seed_1\.npz was trained with another configuration than seed_0\.npz"):
        committed.load_runs(folder)


def test_whole_run_files_and_missing_folders(tmp_path):
    folder = tmp_path / "p"
    _write(
        folder / "grpo.npz", {"error": np.arange(6.0).reshape(2, 3), "loss": np.zeros((2, 3))}, [0, 1], config={"K": 8}
    )
    (folder / "empty.seeds").mkdir()
    runs = committed.load_runs(folder)
    assert set(runs) == {"grpo"}
    assert runs["grpo"].config == {"K": 8} and runs["grpo"].seeds == (0, 1)
    np.testing.assert_array_equal(runs["grpo"].curves["error"], [[0, 1, 2], [3, 4, 5]])
    assert committed.load_summary(folder) is None
    with pytest.raises(ValueError, match="folder"):
        committed.load_runs(tmp_path / "nowhere")


def test_find_results_looks_in_the_env_then_the_parents(tmp_path, monkeypatch):
    (tmp_path / "results").mkdir()
    deep = tmp_path / "book" / "sub"
    deep.mkdir(parents=True)
    monkeypatch.delenv("TPO_RESULTS_DIR", raising=False)
    assert committed.find_results(deep) == tmp_path / "results"
    monkeypatch.setenv("TPO_RESULTS_DIR", str(tmp_path / "missing"))
    assert committed.find_results(deep) is None


def test_the_committed_mnist_runs_match_their_summary():
    folder = ROOT / "results" / "mnist"
    if not folder.is_dir():
        pytest.skip("no committed results/mnist")
    runs, summary = committed.load_runs(folder), committed.load_summary(folder)
    for row in summary["rows"]:
        run = runs[row["key"]]
        assert list(run.seeds) == row["seeds"] and run.length == row["length"]
        np.testing.assert_allclose(100 * run.curves["test_error"][:, -1], row["per_seed"], rtol=1e-6)


def test_duration_text_and_the_t4_estimate_state_their_basis():
    from tpo_core.lab import notebook

    assert [notebook.duration_text(s) for s in (0, 89, 90, 5399, 5400, 36_000)] == [
        "0 s",
        "89 s",
        "2 min",
        "90 min",
        "1.5 h",
        "10.0 h",
    ]
    with pytest.raises(ValueError, match="seconds"):
        notebook.duration_text(-1)
    text = notebook.t4_estimate(3600 * notebook.T4_SPEEDUP_ASSUMED)  # one T4-hour of CPU work
    assert text.startswith("≈ 60 min on a Colab T4") and "estimate" in text and "not measured" in text
    assert f"{notebook.T4_SPEEDUP_ASSUMED:g}×" in text


def test_live_budgets_pick_by_mode_and_scale_by_the_work_ratio(monkeypatch):
    from tpo_core.lab import notebook

    monkeypatch.delenv("TPO_QUICK", raising=False)  # quick: the default
    assert notebook.live_budget("05") == dict(H=6, B=64, episodes=100, seeds=2)
    monkeypatch.setenv("TPO_QUICK", "0")
    assert notebook.live_budget("05") == dict(H=10, B=100, episodes=1000, seeds=20)
    assert notebook.budget_work("05", "full") / notebook.budget_work("05", "quick") == pytest.approx(
        (10 * 100 * 1000 * 20) / (6 * 64 * 100 * 2)
    )
    assert notebook.budget_work("04", "quick") == 3000 * 2
    with pytest.raises(ValueError, match="chapter"):
        notebook.live_budget("99")
    with pytest.raises(ValueError, match="which"):
        notebook.budget_work("06", "medium")


COMMITTED = sorted(ROOT.glob("results/**/summary.json"))


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.parent.relative_to(ROOT / "results")) for p in COMMITTED])
def test_every_committed_summary_has_its_experiment_its_report_and_all_its_seeds(path):
    """Every committed summary's experiment is in the registry and its report renders; every seed of every row is
    on disk: a JAX run file that the runner accepts under the configuration hash it computes today (so a resumed
    reproduction retrains no finished seed), an LLM run file per (method, seed), the spread's settings."""
    import dataclasses

    from tpo_core.lab import report
    from tpo_core.lab.reproduce import experiments, runner

    summary = json.loads(path.read_text())
    experiment = experiments.find(summary["preset"])
    assert experiment is not None, f"{summary['preset']} is not in the registry"
    assert summary["budget"] in experiment.budgets
    md = report.to_markdown([summary])
    assert f"`{summary['preset']}`, budget `{summary['budget']}`" in md and experiment.claim in md
    assert all(f"| {r['key']} | " in md for r in summary["rows"])
    folder = path.parent
    if isinstance(experiment, runner.JaxExperiment):
        runs = {r.key: r for r in experiment.plan(summary["budget"])}
        for row in summary["rows"]:
            run = dataclasses.replace(runs[row["key"]], seeds=tuple(row["seeds"]))
            assert row["config_hash"] == run.config_hash(), row["key"]
            if run.seed_batch:
                for seed in row["seeds"]:
                    assert runner.load_run_file(runner.seed_file(folder, run, seed), run.seed_hash(seed)) is not None, (
                        row["key"],
                        seed,
                    )
            else:
                curves, _ = runner.load_run_file(folder / run.filename, run.config_hash())
                assert curves[run.primary].shape == (len(row["seeds"]), row["length"]), row["key"]
    elif summary["preset"] == "llm_spread":
        settings = json.loads((folder / "spread.json").read_text())["settings"]
        assert {r["key"].split()[0] for r in summary["rows"]} <= {k.split("/")[1] for k in settings}
    else:
        for row in summary["rows"]:
            arm = row["key"].split()[0]
            for seed in row["seeds"]:
                assert list(folder.glob(f"{arm}_*seed{seed}.npz")), (row["key"], seed)


@pytest.mark.parametrize("summary", sorted(ROOT.glob("results/*/summary.json")), ids=lambda p: p.parent.name)
def test_every_committed_summary_names_a_module_that_exists(summary):
    """A summary's ``command`` is how a reader reruns it: its ``python -m`` module must still import (modules
    moved when the lab became a subpackage)."""
    import importlib.util

    command = json.loads(summary.read_text()).get("command")
    if not command:
        pytest.skip(f"{summary.parent.name} records no command")
    words = command.split()
    assert words[:2] == ["python", "-m"], command
    assert importlib.util.find_spec(words[2]) is not None, f"{summary}: {words[2]} is not a module"
