"""tpo_core.lab.llm.sparse: the sparse-reward graph-colouring miniature through TRL's trainers (smoke budget)."""

import itertools
import json

import numpy as np
import pytest

pytest.importorskip("torch", reason="tpo_core.lab.llm needs PyTorch: pip install 'tpo_core[llm]'")
pytest.importorskip("trl", reason="tpo_core.lab.llm needs trl: pip install 'tpo_core[llm]'")
pytest.importorskip("reasoning_gym", reason="tpo_core.lab.llm needs reasoning-gym: pip install 'tpo_core[llm]'")

from tpo_core.lab.llm import sparse


@pytest.fixture(scope="module")
def puzzles():
    return sparse.make_puzzles(12, seed=7)


@pytest.fixture(scope="module")
def smoke_out(tmp_path_factory):
    """The smoke budget's both stages for TPO-mean and GRPO, once for the module (warm starts in a private cache)."""
    import os

    root = tmp_path_factory.mktemp("sparse")
    old = os.environ.get("TPO_CACHE_DIR")
    os.environ["TPO_CACHE_DIR"] = str(root / "cache")
    summary = sparse.run("smoke", root / "out", stage="all", arms=("tpo_mean", "grpo"), quiet=True)
    yield root / "out", summary
    if old is None:
        os.environ.pop("TPO_CACHE_DIR", None)
    else:
        os.environ["TPO_CACHE_DIR"] = old


def _edges(entry):
    return [tuple(e) for e in entry["metadata"]["puzzle"]["edges"]]


def test_tokenizer_round_trip_and_prompt_format(puzzles):
    tok = sparse.tokenizer()
    _, entries = puzzles
    rng = np.random.default_rng(0)
    for entry in entries:
        text = (
            sparse.prompt_text(entry) + " " + sparse.answer_text(rng.integers(1, 4, 6), int(rng.integers(0, 25)), rng)
        )
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == text  # word for word, one space apart
        assert tok.decode(ids + [tok.eos_token_id, tok.pad_token_id], skip_special_tokens=True) == text
        words = text.split()
        assert words[0] == "graph" and words.index("ans") == len(_edges(entry)) + 1  # one token per edge
        assert words[1 : 1 + len(_edges(entry))] == [f"e{u}{v}" for u, v in _edges(entry)]
    assert len(sparse.VOCAB) == len(set(sparse.VOCAB)) == 43


def test_decoded_answers_are_scored_by_the_reasoning_gym_verifier(puzzles):
    ds, entries = puzzles
    rng = np.random.default_rng(1)
    for entry in entries:
        edges = _edges(entry)
        proper = next(c for c in itertools.product((1, 2, 3), repeat=6) if all(c[u] != c[v] for u, v in edges))
        text = sparse.answer_text(proper, 5, rng)
        assert json.loads(sparse.decode_answer(text)) == {str(v): c for v, c in enumerate(proper)}
        assert sparse.score_text(ds, entry, text) == 1.0
        assert ds.score_answer(json.dumps({str(v): c for v, c in enumerate(proper)}), entry) == 1.0  # library's own
        u, v = edges[0]
        improper = list(proper)
        improper[v] = improper[u]
        assert sparse.score_text(ds, entry, sparse.answer_text(improper)) == 0.0
        # parseable but incomplete: the library's 0.01 format credit is not a reward here
        assert ds.score_answer(sparse.decode_answer("hm 0:1 1:2"), entry) == pytest.approx(0.01)
        assert sparse.score_text(ds, entry, "hm 0:1 1:2") == 0.0
        assert sparse.decode_answer("0:1 hm 1:2") is None and sparse.score_text(ds, entry, "e01 0:1") == 0.0


def test_constant_and_random_baselines_match_a_brute_force_count_with_the_library(puzzles):
    ds, entries = puzzles
    entries = entries[:6]
    solved = {}  # answer -> puzzles it solves
    for c in itertools.product((1, 2, 3), repeat=6):
        answer = json.dumps({str(v): col for v, col in enumerate(c)})
        solved[c] = sum(ds.score_answer(answer, e) == 1.0 for e in entries)
    b = sparse.baselines(entries)
    assert b["best_constant"] == pytest.approx(max(solved.values()) / len(entries))
    assert solved[tuple(b["best_constant_answer"])] == max(solved.values())
    assert b["random_colouring"] == pytest.approx(sum(solved.values()) / (729 * len(entries)))


def _fake(edges):
    return {"metadata": {"puzzle": {"edges": [list(e) for e in edges]}}}


def test_sft_colourings_mix_greedy_and_uniform_choices_as_documented():
    rng = np.random.default_rng(0)
    n = 20000
    path = _fake([(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)])
    # rho = 0: uniform colourings; a path is proper with probability (2/3)^5
    c0 = sparse.sft_colourings(rng, [path] * n, 0.0)
    assert c0.shape == (n, 6) and set(np.unique(c0)) == {1, 2, 3}
    assert np.abs(np.bincount(c0.ravel(), minlength=4)[1:] / c0.size - 1 / 3).max() < 0.01
    proper0 = np.all(c0[:, 1:] != c0[:, :-1], axis=1).mean()
    assert abs(proper0 - (2 / 3) ** 5) < 4 * np.sqrt((2 / 3) ** 5 / n)
    # rho = 1 on a path: every vertex has a free colour, so every colouring is proper
    c1 = sparse.sft_colourings(rng, [path] * 2000, 1.0)
    assert np.all(c1[:, 1:] != c1[:, :-1])
    # one edge (0, 1): P(proper) = rho + (1 - rho) * 2/3, closed form
    edge = _fake([(0, 1)])
    for rho in (0.1, 0.5):
        c = sparse.sft_colourings(rng, [edge] * n, rho)
        p = rho + (1 - rho) * 2 / 3
        assert abs((c[:, 0] != c[:, 1]).mean() - p) < 4 * np.sqrt(p * (1 - p) / n), rho
    # K4 on 0..3 under rho = 1: vertices 0..2 get three distinct colours, vertex 3 has none free -> uniform
    k4 = _fake([(u, v) for u in range(4) for v in range(u + 1, 4)])
    c = sparse.sft_colourings(rng, [k4] * n, 1.0)
    assert np.all(np.sort(c[:, :3], axis=1) == [1, 2, 3])
    assert abs((c[:, 3] == c[:, 0]).mean() - 1 / 3) < 0.02
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="sft_greedy"):
            sparse.sft_colourings(rng, [edge], bad)


def test_warm_start_learns_the_format_not_the_task_and_is_cached_deterministically(tmp_path):
    import torch

    b = sparse.BUDGETS["smoke"]
    model, meta = sparse.warm_start(3, b, cache=tmp_path / "a")
    ev = meta["heldout"]
    assert ev["valid_t1"] >= 0.8  # the answer format, mostly
    assert 0.0 < ev["success_t1"] <= 0.4  # random colourings: rarely proper
    assert meta["sft_loss_last"] < meta["sft_loss_first"]
    s = meta["logp_spread"]  # the filler prefix spreads the sums
    assert s["std_sum_median"] > 1.0 and s["std_sum_median"] > 5 * s["std_mean_median"]
    again, meta2 = sparse.warm_start(3, b, cache=tmp_path / "a")  # loaded from the cache
    fresh, _ = sparse.warm_start(3, b, cache=tmp_path / "b")  # retrained: the same weights
    for p, q, r in zip(model.parameters(), again.parameters(), fresh.parameters()):
        assert torch.equal(p, q) and torch.equal(p, r)
    assert meta2 == json.loads(json.dumps(meta))


def test_smoke_runs_both_trainers_end_to_end_and_resumes(smoke_out, capsys):
    out, summary = smoke_out
    b = sparse.BUDGETS["smoke"]
    for arm in ("tpo_mean", "grpo"):
        for lr in b.lrs:
            assert (out / f"{arm}_lr{lr:g}_seed100.npz").is_file()  # the grid
    chosen = summary["chosen_lr"]
    assert set(chosen) == {"tpo_mean", "grpo"}
    for arm in ("tpo_mean", "grpo"):  # the rule, recomputed here
        means = {
            lr: np.mean(
                [json.loads((out / f"{arm}_lr{lr:g}_seed{s}.json").read_text())["auc_success"] for s in b.grid_seeds]
            )
            for lr in b.lrs
        }
        best = max(means.values())
        assert chosen[arm] == min(lr for lr in b.lrs if means[lr] == best)
        for seed in b.main_seeds:
            c = np.load(out / f"{arm}_lr{chosen[arm]:g}_seed{seed}.npz")
            assert c["reward"].shape == (b.steps,) and np.isfinite(c["grad_norm"]).all()
            assert list(c["eval_step"]) == [0, 1, 2] and c["eval_success_t1"].shape == (3,)
            meta = json.loads((out / f"{arm}_lr{chosen[arm]:g}_seed{seed}.json").read_text())
            assert meta["final_success"] == pytest.approx(c["eval_success_t1"][-1])
            assert meta["auc_success"] == pytest.approx(np.mean(c["eval_success_t1"][1:]))  # after step 0
            assert meta["config"]["arm"] == arm and meta["config"]["common"]["budget"]["k"] == b.k
    tpo, grpo = (np.load(out / f"{a}_lr{chosen[a]:g}_seed0.npz") for a in ("tpo_mean", "grpo"))
    assert np.isfinite(tpo["tpo_tv"]).all() and "tpo_tv" not in grpo.files  # the trainer's tpo/tv, by name
    assert np.isfinite(grpo["abs_advantage"]).all() and np.isnan(tpo["abs_advantage"]).all()
    assert tpo["reward"][0] == grpo["reward"][0]  # same warm start, prompts and sampling
    assert tpo["eval_success_t1"][0] == grpo["eval_success_t1"][0]
    assert summary["main"]["tpo_mean"]["seeds"] == list(b.main_seeds)
    v = summary["verdicts"][0]
    assert (
        (v["a"], v["b"]) == ("tpo_mean", "grpo")
        and v["two_sample_verdict"]["verdict"] in ("consistent", "inconsistent", "inconclusive")
        and "p_value" in v["mann_whitney"]
    )
    assert 0 < summary["baselines"]["random_colouring"] < summary["baselines"]["best_constant"] < 1
    assert not list(out.glob("*.partial.npz")) and "held-out success, T = 1" in (out / "figure.html").read_text()

    from tpo_core.lab import report

    assert "llm_sparse_coloring" in report.to_markdown(report.load_summaries(out))

    capsys.readouterr()
    sparse.run("smoke", out, stage="all", arms=("tpo_mean", "grpo"))  # resumed: nothing retrained
    printed = capsys.readouterr().out
    assert printed.count("already done") == 2 * len(b.lrs) * len(b.grid_seeds) + 2 * len(b.main_seeds)
    assert "steps in" not in printed


def test_reproduce_preset_reuses_finished_runs(smoke_out, capsys):
    from tpo_core.lab import cli

    out, _ = smoke_out
    assert (
        cli.main(
            [
                "reproduce",
                "llm_sparse_coloring",
                "--budget",
                "smoke",
                "--out",
                str(out),
                "--only",
                "tpo_mean,grpo",
                "--quiet",
            ]
        )
        == 0
    )
    assert "llm_sparse_coloring" in capsys.readouterr().out
    assert json.loads((out / "summary.json").read_text())["preset"] == "llm_sparse_coloring"


def test_main_exit_2_with_one_line_on_bad_input(tmp_path, capsys):
    from tpo_core.lab import cli

    for argv in (
        ["--budget", "huge"],
        ["--stage", "both"],
        ["--arms", "ppo"],
        ["--seeds", "a,b"],
        ["--seeds", "-1"],
        ["--num-iterations", "0"],
        ["--num-iterations", "x"],
        ["--bogus"],
        ["--stage", "main"],
        ["--summarize", "--out", str(tmp_path / "missing")],
    ):
        args = argv if "--out" in argv else argv + ["--out", str(tmp_path)]
        assert sparse.main(args) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), (argv, err)
    for argv in (["--only", "ppo"], ["--budget", "paper"], ["--chunk", "5"]):
        assert cli.main(["reproduce", "llm_sparse_coloring", "--out", str(tmp_path), *argv]) == 2, argv
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "summary.json").exists()
