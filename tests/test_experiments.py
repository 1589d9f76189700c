"""tpo_core.lab.reproduce.experiments: one registry and protocol for the JAX presets and the LLM experiments, one
``reproduce`` path in the CLI and one report renderer for both."""

import html
import json
import re
import subprocess
import sys

import pytest

from tpo_core.lab import cli, report
from tpo_core.lab.llm import spread
from tpo_core.lab.reproduce import experiments, presets

JAX = {
    "mnist",
    "table1",
    "table2",
    "table3",
    "anchor",
    "k_sweep",
    "epoch_sweep",
    "grpo_masked",
    "eta_sweep",
    "dapo",
    "std_noise",
}
LLM = {"llm_graph_coloring", "llm_knights_knaves", "llm_sparse_coloring", "llm_spread"}


def test_the_registry_lists_every_experiment_without_importing_torch():
    code = (
        "import sys; from tpo_core.lab.reproduce import experiments as E; names = E.names(); text = E.list_text(); "
        "found = [E.get(n) for n in names]; "
        "assert all(isinstance(e, E.Experiment) for e in found), [type(e) for e in found]; "
        "assert all(e.name == n and e.title and e.claim and e.budgets for n, e in zip(names, found)); "
        "print(' '.join(names)); sys.exit(3 if 'torch' in sys.modules or 'trl' in sys.modules else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    names = done.stdout.split()
    assert set(names) == JAX | LLM and len(names) == len(JAX | LLM)
    assert names[: len(JAX)] == list(presets.PRESETS)  # the JAX presets first, in their own order


def test_every_budget_has_a_note_and_a_plan():
    for name in experiments.names():
        e = experiments.get(name)
        for budget in e.budgets:
            assert e.budget_note(budget).strip(), (name, budget)
            assert len(e.plan(budget)) >= 1, (name, budget)
        lines = e.list_text().splitlines()
        assert lines[0].split()[0] == name and len(lines) == 1 + len(e.budgets)


def test_get_refuses_an_unknown_name_naming_the_parameter():
    with pytest.raises(ValueError, match=r"name must be one of .*llm_spread.*, got 'table9'"):
        experiments.get("table9")
    assert experiments.find("table9") is None


class _Recorder:
    """A stand-in experiment: records what the CLI hands it."""

    name, title, claim, budgets = "recorder", "A recorder", "claim", ("smoke",)

    def __init__(self):
        self.calls = []

    def budget_note(self, budget):
        return "note"

    def plan(self, budget):
        return []

    def default_out(self, budget):
        return f"/nowhere/{budget}"

    def train(self, budget, out=None, **kw):
        self.calls.append(dict(budget=budget, out=out, **kw))
        return None

    def metric_label(self, metric):
        return metric

    def rows(self, summary):
        return experiments.labelled_rows(summary, self.metric_label)

    def notes(self, summary):
        return "recorded"

    def list_text(self):
        return "recorder   A recorder"


def test_the_cli_hands_every_flag_to_the_experiment_it_names(monkeypatch, capsys):
    fake = _Recorder()
    assert isinstance(fake, experiments.Experiment)
    monkeypatch.setitem(spread.EXPERIMENTS, fake.name, fake)  # a family's dict: the registry reads it on each call
    assert (
        cli.main(
            ["reproduce", "recorder", "--budget", "smoke", "--chunk", "3", "--only", "a, b", "--seeds", "2", "--quiet"]
        )
        == 0
    )
    (call,) = fake.calls
    assert call == dict(
        budget="smoke",
        out="/nowhere/smoke",
        seeds=2,
        only=["a", "b"],
        partial=False,
        progress=False,
        command="python -m tpo_core reproduce recorder --budget smoke --seeds 2 --out /nowhere/smoke",
        chunk=3,
        distributed=False,
    )
    assert "trained a, b" in capsys.readouterr().out
    assert cli.main(["reproduce", "--list"]) == 0
    assert "recorder   A recorder" in capsys.readouterr().out


@pytest.mark.parametrize(
    "name, argv, needle",
    [
        ("llm_graph_coloring", ["--chunk", "5"], "chunk does not apply to llm_graph_coloring"),
        ("llm_sparse_coloring", ["--distributed"], "distributed does not apply to llm_sparse_coloring"),
        ("llm_spread", ["--seeds", "2"], "seeds does not apply to llm_spread"),
        ("table3", ["--budget", "gpu"], "budget must be one of smoke, cpu, paper, paper-h10, paper-h7 for table3"),
        ("llm_graph_coloring", ["--budget", "paper"], "budget must be one of smoke, cpu, gpu for llm_graph_coloring"),
    ],
)
def test_an_experiment_refuses_what_does_not_apply_to_it_in_one_line(tmp_path, name, argv, needle):
    done = subprocess.run(
        [sys.executable, "-m", "tpo_core", "reproduce", name, "--out", str(tmp_path / "o"), *argv],
        capture_output=True,
        text=True,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert needle in lines[0]
    assert not (tmp_path / "o").exists()


def test_a_jax_preset_trains_through_the_same_path(tmp_path, capsys):
    out = tmp_path / "eta"
    assert cli.main(["reproduce", "eta_sweep", "--budget", "smoke", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["preset"] == "eta_sweep" and summary["engine"] == [presets.RESULTS_VERSION]
    assert summary["command"] == f"python -m tpo_core reproduce eta_sweep --budget smoke --out {out}"
    assert f"wrote {out}/summary.json, {out}/figure.html and {len(summary['rows'])} rows" in printed
    assert "`eta_sweep`, budget `smoke`" in printed and "engine 2" in printed
    assert sorted(p.name for p in out.glob("*.npz")) == ["tpo_token_eta_0.5.npz", "tpo_token_eta_2.npz"]


def _row(key, metric, ours, se, seeds, **extra):
    return dict(
        dict(
            key=key,
            metric=metric,
            ours=ours,
            se=se,
            seeds=seeds,
            length=20,
            comparable=False,
            paper=None,
            paper_text="no paper number at this setting",
            verdict=None,
        ),
        **extra,
    )


def _summaries():
    jax = dict(
        preset="table3",
        title="Table 3 (test)",
        claim="saved claim",
        budget="paper-h10",
        budget_note="a note",
        paper_setting="the setting",
        command="python -m tpo_core reproduce table3",
        engine=[1, 2],
        train_seconds=12.0,
        devices=1,
        rows=[
            _row(
                "tpo H=10 P",
                "final_error",
                3.25,
                0.5,
                [0, 1],
                comparable=True,
                paper=4.1,
                paper_text="4.1",
                paper_se=0.3,
                resolution=5.0,
                verdict="inconsistent",
            )
        ],
    )
    llm = dict(
        preset="llm_graph_coloring",
        title="LLM <test> & co",
        claim="saved claim",
        budget="cpu",
        budget_note="another note",
        paper_setting="verl",
        command="python -m tpo_core reproduce llm_graph_coloring",
        kind="llm",
        train_seconds=7.0,
        devices=1,
        rows=[_row("tpo", "start_reward", 0.0126, None, [0]), _row("grpo", "final_reward", 0.25, 0.125, [0, 1])],
    )
    gone = dict(
        preset="retired_preset",
        title="Retired",
        claim="its own saved claim",
        budget="cpu",
        budget_note="n",
        paper_setting="s",
        command="c",
        rows=[_row("x", "some_metric", 1.0, None, [0])],
    )
    return [jax, llm, gone]


def test_one_renderer_for_a_jax_and_an_llm_summary():
    md = report.to_markdown(_summaries(), command="python -m tpo_core report R --out R.md")
    # the experiment supplies its claim (the registry's wording, not the saved one), metric names and notes
    assert f"**Paper's claim.** {presets.PRESETS['table3'].claim}" in md
    assert "**Paper's claim.** GRPO collapses on Qwen3-1.7B; TPO reaches about 0.96 (verl; §3.8, App. G)" in md
    assert "**Paper's claim.** its own saved claim" in md  # an experiment no longer registered
    assert (
        "engine 1 (trained before the q/k/v attention biases were routed to Muon as in the reference); engine 2."
    ) in md
    assert "PyTorch + TRL (tpo_core.lab.llm.rlvr), not the JAX engine." in md
    assert "| tpo H=10 P | final error (%) | 3.25 ± 0.50 | 4.1 ± 0.30 | 5 | inconsistent | 2 × 20 |" in md
    assert "| tpo | mean reward at step 1 (the starting policy) | 0.013 ± n/a | no paper number at this setting |" in md
    assert "| grpo | mean reward, last fifth of the steps | 0.250 ± 0.125 |" in md
    assert "| x | some_metric | 1.00 ± n/a |" in md
    page = report.to_html(_summaries(), command="python -m tpo_core report R --out R.md")
    assert "<td class='inconsistent'>inconsistent</td>" in page and "LLM &lt;test&gt; &amp; co" in page
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    for line in md.splitlines():  # every paragraph and heading of the markdown, markup removed
        if line and not line.startswith("|"):
            plain = re.sub(r"\*\*|`|(?<!\w)\*|\*(?!\w)", "", line.lstrip("# "))
            assert plain in text, plain


def test_train_refuses_an_option_it_does_not_take_before_training(tmp_path):
    with pytest.raises(ValueError, match=r"^bogus does not apply to table3 \(a JAX preset\)$"):
        experiments.get("table3").train("smoke", tmp_path / "t", bogus=1)
    with pytest.raises(ValueError, match="^only does not apply to llm_spread"):
        experiments.get("llm_spread").train("cpu", tmp_path / "s", only=["v3"])
    with pytest.raises(
        ValueError,
        match=r"^only must name methods of llm_graph_coloring \(tpo, grpo, tpo_mean\), "
        r"got ppo$",
    ):
        experiments.get("llm_graph_coloring").train("smoke", tmp_path / "g", only=["ppo"])
    assert not any(tmp_path.iterdir())
