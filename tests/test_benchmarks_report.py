"""benchmarks/report.py: every committed results file rendered into one page and the README's Performance table, so
a figure in the README cannot drift from the results file a benchmark wrote; results files without their command
are refused."""

import json
import pathlib

import pytest

from benchmarks import record, report

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _between(text, begin, end):
    assert text.count(begin) == 1 and text.count(end) == 1, "README.md needs one performance table between markers"
    return text[text.index(begin) : text.index(end) + len(end)]


def test_readme_performance_table_and_the_page_are_what_the_committed_results_give():
    results = report.load()
    assert "demo_load" in results and "bench_train" in results
    readme = (ROOT / "README.md").read_text()
    block = _between(readme, report.README_BEGIN, report.README_END)
    assert block == report.readme_block(results), "README.md's table is stale: python -m benchmarks.report --readme"
    assert (ROOT / "benchmarks" / "results" / "README.md").read_text() == report.page(results), (
        "benchmarks/results/README.md is stale: python -m benchmarks.report"
    )


def test_the_table_quotes_the_results_files_figures():
    """Figures read here from the JSON, formatted independently of the benchmarks' renderers, appear in the table."""
    block = report.readme_block(report.load())
    train = json.loads((ROOT / "benchmarks" / "results" / "bench_train.json").read_text())
    assert f"{train['runs'][0]['episode_s']:.3f} s" in block
    assert f"compile {train['runs'][0]['compile_s']:.1f} s" in block
    load = json.loads((ROOT / "benchmarks" / "results" / "demo_load.json").read_text())
    assert f"{load['memory']['growth_after_first_block_mb']:+.1f} MB" in block
    for name in ("bench_train", "demo_load"):
        r = json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())
        assert f"({r['date']}, `{r['commit']}`; {r['machine']['cpus']} CPUs at load " in block
    page = report.page(report.load())
    assert "`" + train["command"] + "`" in page and "`" + load["command"] + "`" in page


def test_an_absent_results_file_is_said_not_run_and_a_gpu_one_needs_a_gpu(tmp_path):
    assert report.load(tmp_path) == {}
    page, block = report.page({}), report.readme_block({})
    assert "Not run (needs a GPU): no `benchmarks/results/gpu_table3.json`" in page
    assert "| [gpu_table3](benchmarks/results/README.md#gpu_table3) | — | not run (needs a GPU) |" in block


def test_a_results_file_without_its_command_is_refused(tmp_path):
    good = json.loads((ROOT / "benchmarks" / "results" / "demo_load.json").read_text())
    (tmp_path / "demo_load.json").write_text(json.dumps(good))
    assert set(report.load(tmp_path)) == {"demo_load"}
    del good["command"]
    (tmp_path / "demo_load.json").write_text(json.dumps(good))
    with pytest.raises(ValueError, match=r"demo_load\.json.*missing command"):
        report.load(tmp_path)
    with pytest.raises(ValueError, match="missing command"):
        record.write("demo_load", good, tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()


def test_a_results_file_no_benchmark_owns_is_refused(tmp_path):
    (tmp_path / "nobody.json").write_text(json.dumps(record.header("python -m benchmarks.nobody")))
    with pytest.raises(ValueError, match="no benchmark named nobody"):
        report.load(tmp_path)


def test_readme_markers_must_appear_once():
    with pytest.raises(ValueError, match="exactly one performance table"):
        report.readme_with_table("no markers here", report.readme_block({}))
    text = f"a\n{report.README_BEGIN}\nold\n{report.README_END}\nb"
    assert report.readme_with_table(text, "NEW") == "a\nNEW\nb"


def test_a_gpu_results_file_renders_its_throughput():
    """gpu_table3.py cannot run on this CPU; its renderer is checked on a results file of its shape."""
    r = dict(
        record.header("python -m benchmarks.gpu_table3 --minutes 9"),
        kind="NVIDIA H100",
        out="results/x",
        minutes=9.0,
        wall_seconds=540.0,
        configurations=2,
        of=9,
        seed_episodes_per_second={"tpo_H_10_P": 1234.4, "grpo_H_10_P": 987.6},
    )
    r["machine"]["devices"] = ["cuda:0"]
    record.finish(r)
    page, block = report.page({"gpu_table3": r}), report.readme_block({"gpu_table3": r})
    assert "| tpo_H_10_P: seed-episodes per second | 1234 |" in page
    assert "| grpo_H_10_P: seed-episodes per second | 988 |" in page
    assert "2 of 9 in 540 s" in page and "not run (needs a GPU)" not in page
    assert "Table 3 at the paper's budget on NVIDIA H100: tpo_H_10_P | 1234 seed-episodes / s" in block


def test_every_section_of_a_training_results_file_renders():
    """bench_train's optional sections (--seeds 1 8, the sweep, --ops, --compile, --startup) on a results file of
    their shape: each figure appears on the page, and the README rows take the 1-seed and 8-seed runs."""
    from benchmarks import bench_train

    r = dict(
        record.header("python -m benchmarks.bench_train --ops --compile --startup"),
        config={"method": "tpo", "H": 10, "V": 2, "B": 100, "K": 8, "epochs": 4, "episodes": 20},
        runs=[
            {"seeds": 1, "form": "vmapped", "compile_s": 6.5, "episode_s": 0.15, "x_first": 1.0},
            {"seeds": 8, "form": "vmapped", "compile_s": 9.0, "episode_s": 1.071, "x_first": 7.14},
            {"seeds": 8, "form": "run_batch=1", "compile_s": 8.0, "episode_s": 1.16, "x_first": 7.73},
        ],
        sweep={
            "etas": bench_train.ETAS,
            "seeds": 2,
            "forms": [{"form": "vmapped", "compile_s": 10.0, "episode_s": 1.371, "x_first": 9.14}],
        },
        profile={
            "episode_s": 0.15,
            "sampling_s": 0.012,
            "forward_backward_s": 0.054,
            "optimizer_s": 0.0011,
            "epochs": 4,
        },
        ops={
            "episodes_traced": 2,
            "wall_s_per_episode": 0.2,
            "kernel_s_per_episode": 0.2,
            "by_phase_s": {"forward_backward": 0.172, "sampling": 0.018, "optimizer": 0.01},
            "by_kind_s": {
                "matrix products": 0.13,
                "layout copies / transposes": 0.006,
                "other fusions (elementwise, reductions, gathers)": 0.064,
            },
        },
        compile={
            "init_s": 0.8,
            "trace_s": 0.5,
            "lower_s": 0.2,
            "llvm_kernels": 468,
            "episodes": 5,
            "rounds": 6,
            "stages_s": {title: 1.0 for title, _ in bench_train.COMPILE_STAGES},
            "settings": {
                "default": {
                    "compile_s": 4.4,
                    "episode_best_s": 0.152,
                    "episode_median_s": 0.155,
                    "max_metric_difference": 0.0,
                }
            },
        },
        startup={
            "cold": {"compile": 6.85, "episode": 0.15, "cache_files": 9},
            "from_cache": {"compile": 1.89, "episode": 0.15, "cache_files": 9},
        },
    )
    record.finish(r)
    page, block = report.page({"bench_train": r}), report.readme_block({"bench_train": r})
    for text in (
        "1.071 s (7.14× the first row), compile 9.0 s",
        "run_batch=1",
        "1.371 s / episode (9.14× the first row)",
        "0.150 s = 0.012 + 4 × (0.054 + 0.0011) s",
        "forward_backward 86 %",
        "layout copies / transposes 3 %",
        "468 fused kernels",
        "4.40 s, 0.152 / 0.155 s",
        "6.85 s / 1.89 s",
    ):
        assert text in page, text
    assert "| 0.150 s, compile 6.5 s (" in block and "| 7.14× (" in block and "| 1.89 s (" in block
