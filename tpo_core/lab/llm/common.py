"""What the LLM experiments (``rlvr``, ``sparse``, ``spread``) share: one TRL trainer set-up, their registry
entries' common methods and their command lines' error protocol.

* ``trl_args``: TRL's ``GRPOConfig`` or ``TargetPOConfig``, and the trainer class, with the settings both
  training experiments fix (one optimizer step per generation, β = 0, temperature 1, top-p 1, no top-k, a
  constant learning rate, no checkpoints, a log entry every step);
* ``RegistryEntry`` (``rows`` and ``list_text`` of the registry's protocol,
  ``tpo_core.lab.reproduce.experiments.Experiment``) and ``TrlExperiment`` (also ``budget_note``,
  ``default_out``, ``train`` and ``notes``), which the experiments' frozen dataclasses inherit;
* ``check_preset``: a training experiment's argument checks, results folder and command line;
* ``word_tokenizer`` (the smoke and sparse models' word-level vocabularies) and ``report_row`` (a report row
  with no paper number);
* ``OneLineParser`` and ``cli``: a bad flag or value ends ``main`` with one ``error: ...`` line and exit status 2.

Like the experiments' modules this one imports no NumPy, PyTorch or TRL at import time (they load when a run
starts), so listing and reporting the experiments imports no torch.
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys

from ..reproduce import experiments

__all__ = [
    "trl_args",
    "RegistryEntry",
    "TrlExperiment",
    "default_out",
    "check_preset",
    "OneLineParser",
    "cli",
    "SPECIAL_TOKENS",
    "word_tokenizer",
    "tiny_llama",
    "report_row",
]


def _grpo_trainer_class():
    """TRL's ``GRPOTrainer`` unchanged but for one extra logged number, the mean |advantage| of each batch."""
    from trl import GRPOTrainer

    class GRPOTrainerLoggingAdvantages(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            mode = "train" if self.model.training else "eval"
            self._metrics[mode]["grpo/abs_advantage"].append(output["advantages"].abs().mean().item())
            return output

    return GRPOTrainerLoggingAdvantages


def trl_args(method: str, budget, output_dir, *, steps: int, learning_rate: float, seed: int, num_iterations: int = 1):
    """The TRL arguments and trainer class of one (method, seed) run: ``method="grpo"`` is TRL's ``GRPOConfig``
    and ``GRPOTrainer`` (logging the mean |A| as ``grpo/abs_advantage``), any other ``TargetPOConfig`` and
    ``TargetPOTrainer`` at η = 1 with ``tpo_mode="exact"`` and length-normalised sequence log-probs for
    ``tpo_mean``, token-summed ones otherwise. ``budget`` gives the batch (``prompts_per_step`` x ``k``
    completions), ``k`` and ``max_completion_length``; ``num_iterations`` is TRL's (optimizer steps on each
    generation's batch: 1 by default). ``output_dir`` is the Trainer's scratch folder (it saves nothing)."""
    import torch
    from trl import GRPOConfig

    from tpo_core.bridge.trl import TargetPOConfig, TargetPOTrainer

    common = dict(
        output_dir=output_dir,
        per_device_train_batch_size=budget.prompts_per_step * budget.k,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=num_iterations,
        num_generations=budget.k,
        max_completion_length=budget.max_completion_length,
        max_steps=steps,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        beta=0.0,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        seed=seed,
        data_seed=seed,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    if method == "grpo":
        args, trainer_cls = GRPOConfig(**common), _grpo_trainer_class()
    else:
        args = TargetPOConfig(
            **common, eta=1.0, sequence_logp="mean" if method == "tpo_mean" else "sum", tpo_mode="exact"
        )
        trainer_cls = TargetPOTrainer
    return args, trainer_cls


SPECIAL_TOKENS = ("[PAD]", "[BOS]", "[EOS]", "[UNK]")  # ids 0-3 of every word-level vocabulary here


def word_tokenizer(vocab, *, join_words: bool = False):
    """A word-level ``PreTrainedTokenizerFast`` over ``vocab`` (token i has id i; it starts with
    ``SPECIAL_TOKENS``): text splits on white space, a word outside ``vocab`` is ``[UNK]``, padding is on the
    left (as TRL generates). ``join_words``: decoding puts one space between words (a ``WordPiece`` decoder
    whose continuation prefix no word carries); otherwise the tokenizer has no decoder."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    if tuple(vocab[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
        raise ValueError(f"vocab must start with {list(SPECIAL_TOKENS)}, got {list(vocab[: len(SPECIAL_TOKENS)])}")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if join_words:
        tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]",
        bos_token="[BOS]",
        eos_token="[EOS]",
        unk_token="[UNK]",
        padding_side="left",
    )


def tiny_llama(seed: int | None = 0, *, max_position_embeddings: int = 512):
    """The bridge's smoke model: a random 2-layer ``LlamaForCausalLM`` (d = 32, 4 heads, 2 key-value heads,
    vocabulary 64 with pad, bos, eos at the ids of :data:`SPECIAL_TOKENS`), initialised after
    ``torch.manual_seed(seed)`` (``None``: from the RNG's current state)."""
    import torch
    import transformers

    if seed is not None:
        torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return transformers.LlamaForCausalLM(config)


def report_row(key: str, metric: str, ours: float, se, seeds: list, length: int) -> dict:
    """One row of ``python -m tpo_core report`` for a result with no paper number at its setting: ``ours`` ±
    ``se`` (None: no standard error) over ``seeds``, ``length`` steps (or groups); not comparable, no verdict."""
    return {
        "key": key,
        "metric": metric,
        "ours": ours,
        "se": se,
        "seeds": seeds,
        "length": length,
        "comparable": False,
        "paper": None,
        "paper_text": "no paper number at this setting",
        "verdict": None,
    }


def default_out(name: str, budget: str) -> pathlib.Path:
    """``results/<name>_<budget>``: a training experiment's results folder when none is given."""
    return pathlib.Path(f"results/{name}_{budget}")


def check_preset(name: str, budget: str, out, seeds, command, *, presets, budgets) -> tuple[pathlib.Path, str]:
    """``TrlExperiment.train``'s checks (``name`` one of ``presets``, ``budget`` one of ``budgets``, ``seeds`` None or an
    integer ≥ 1), then its results folder (``out``, else ``default_out``) and the command line the summary
    records (``command``, else the ``python -m tpo_core reproduce`` line that trains it)."""
    if name not in presets:
        raise ValueError(f"name must be one of {', '.join(presets)}, got {name!r}")
    if budget not in budgets:
        raise ValueError(f"budget must be one of {', '.join(budgets)} for {name}, got {budget!r}")
    if seeds is not None and not (isinstance(seeds, int) and seeds >= 1):
        raise ValueError(f"seeds must be an integer >= 1, got {seeds!r}")
    out = pathlib.Path(out) if out else default_out(name, budget)
    command = command or (
        f"python -m tpo_core reproduce {name} --budget {budget}"
        + (f" --seeds {seeds}" if seeds else "")
        + f" --out {out}"
    )
    return out, command


class RegistryEntry:
    """``rows`` and ``list_text`` of an LLM experiment of the registry: the summary's rows with
    ``metric_label``, and the name and title over one line per budget (``budget_line``, by default the
    ``budget_note``). The subclass supplies the protocol's ``name``, ``title``, ``budgets``, ``budget_note``
    and ``metric_label``."""

    def budget_line(self, budget: str) -> str:
        """What ``budget`` trains, as ``--list`` shows it."""
        return self.budget_note(budget)

    def rows(self, summary: dict) -> list[dict]:
        return experiments.labelled_rows(summary, self.metric_label)

    def list_text(self) -> str:
        return "\n".join(
            [f"{self.name:12s} {self.title}"] + experiments.budget_lines({b: self.budget_line(b) for b in self.budgets})
        )


class TrlExperiment(RegistryEntry):
    """A training LLM experiment of the registry, driven through TRL by its module's ``run_preset``. The
    subclass, a frozen dataclass with ``name`` and ``budgets``, names three things of its module as class
    keywords (``class E(TrlExperiment, budget_table=BUDGETS, methods=METHODS, run_preset=run_preset)``):
    its budgets (each with a ``note``), what ``only`` may name, and the function that trains a preset.
    ``train`` refuses the JAX engine's options and an ``only`` that names nothing or a method outside
    ``methods``, checks the rest (``check_preset``), then hands on to
    ``run_preset(name, budget, out, command, seeds, methods, partial, quiet)``."""

    def __init_subclass__(cls, *, budget_table, methods, run_preset, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.budget_table, cls.methods, cls.run_preset = budget_table, tuple(methods), staticmethod(run_preset)

    def budget_note(self, budget: str) -> str:
        return self.budget_table[budget].note

    def default_out(self, budget: str) -> pathlib.Path:
        return default_out(self.name, budget)

    def train(
        self,
        budget: str,
        out=None,
        *,
        seeds: int | None = None,
        only=None,
        partial: bool = False,
        progress: bool = True,
        command: str | None = None,
        **options,
    ) -> dict:
        experiments.refuse_options(self, options, "a PyTorch + TRL run, not the JAX engine")
        if only is not None:
            bad = [m for m in only if m not in self.methods]
            if bad or not only:
                raise ValueError(
                    f"only must name methods of {self.name} ({', '.join(self.methods)}), "
                    f"got {', '.join(bad) or 'nothing'}"
                )
        out, command = check_preset(
            self.name, budget, out, seeds, command, presets=(self.name,), budgets=self.budget_table
        )
        return self.run_preset(self.name, budget, out, command, seeds, only, partial, not progress)

    def notes(self, summary: dict) -> str:
        return f"PyTorch + TRL ({type(self).__module__}), not the JAX engine"


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors raise ``ValueError`` (the one ``error: ...`` line of ``cli``,
    exit status 2) instead of printing the usage and exiting."""

    def error(self, message):
        raise ValueError(message)


def cli(main):
    """``main(argv)`` as a command line's entry point: it returns 0, or, when ``main`` raises ``ValueError`` (a
    bad flag or value), prints one ``error: ...`` line on stderr and returns 2."""

    @functools.wraps(main)
    def entry(argv=None) -> int:
        try:
            main(argv)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0

    return entry
