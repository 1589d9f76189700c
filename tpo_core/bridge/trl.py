"""TPO for TRL: ``TargetPOConfig`` and ``TargetPOTrainer`` on top of TRL's ``GRPOTrainer`` (tested with trl 1.16.0).

Target Policy Optimization (Kaddour 2026, arXiv 2604.06159; reference code github.com/JeanKaddour/tpo): per
prompt, K completions with scores s; u = group z-score (population std, u = c if σ ≤ 1e-6); target
q = softmax(log softmax(ℓ_old) + u/η) frozen; loss the cross-entropy -Σ q log softmax(ℓ(θ)) over the group, ℓ the
completion's sequence score. (TRL's own ``trl.experimental.tpo`` is an unrelated "Triple Preference Optimization".)

**The sequence score ℓ** (``sequence_logp``) is a named choice:

* ``"mean"`` (default): the mean token log-prob over the completion mask, as the author's TargetPO trainer
  proposed to TRL (huggingface/trl PR #5591, ``tpo_length_normalize_logps=True``). Our evidence for the default
  (``results/llm_graph_coloring_cpu``, ``results/llm_spread``; book chapter 11): with sums, the group softmax
  p_old of a real LM's K sampled strings sits on one or two of them (SmolLM2-135M, 32-token completions: median
  H(p_old) 0.71 nats of ln 16 = 2.77), so q ≈ p_old (median TV(q, p_old) 0.002 per step) and TPO-sum lost to
  GRPO on every seed; with means the target moved on every step (TV 0.16–0.77).
* ``"sum"``: the paper's definition (§2, §3.4): ℓ = Σ_t log π(y_t | ·), the completion's exact log-probability.
  The paper's LLM code is unreleased and its App. G does not say which of the two its verl runs used.

The trainer logs H(p_old) (``tpo/entropy_p_old``) and TV (``tpo/tv``): a median TV far below the reward's
spread says the target is not moving (switch to ``"mean"`` or lower η).

What differs from ``GRPOTrainer`` (and only that is overridden):

* **rewards kept per group**: the weighted reward of every completion and its global group id travel
  with the batch (``tpo_scores``, ``tpo_group_id``) instead of GRPO's advantages;
* **groups, not rows, are shuffled** before the generation batch is split into micro-batches, so every
  micro-batch holds whole groups (``per_device_train_batch_size`` a multiple of ``num_generations``);
* **the loss** (``tpo_mode``):

  - ``"exact"``: TPO's group cross-entropy on the current policy — exact for any number of
    iterations (``num_iterations``) over a generation. When a group spans processes
    (``per_device_train_batch_size`` not a multiple of K, ``steps_per_generation == 1``) the sequence
    log-probs are all-gathered **with autograd** (``torch.distributed.nn.functional.all_gather``): each
    rank computes the full loss, the all-gather's backward sums the ranks' gradients and DDP's average
    divides them back, so the update is the exact gradient of the mean over all groups;
  - ``"decomposed"``: the policy-gradient surrogate -mean_i w_i ℓ_i with w = K (q - p_old) computed at
    generation time over whole groups; rows may then be split and ordered freely, but it equals TPO's
    gradient only at θ = θ_old (``num_iterations=1`` and ``steps_per_generation ==
    gradient_accumulation_steps``: one optimizer step per generation);
* **the group maths in float64**: the [groups, K] softmax, target and loss run in float64 whatever the
  model's dtype (in float32 the direction of p − q is rounding noise once TV ≲ 1e-7);
* **completions with an all-zero loss mask** (``mask_truncated_completions=True``, tool masking) are left
  out of the group softmax, the target and the diagnostics (ℓ = 0 would otherwise be the group's largest
  score and take nearly all of p_old);
* **``beta > 0``** adds GRPOTrainer's own KL term to the reference model (k3 per token, aggregated by
  ``loss_type`` exactly as GRPOTrainer does; the paper's GSM8K runs used 1e-3 for both methods);
* **diagnostics** logged as ``tpo/entropy_p_old``, ``tpo/entropy_q``, ``tpo/tv``, ``tpo/kl_q_p_old``,
  ``tpo/zero_variance_frac``, ``tpo/argmax_moved_frac``, and the within-group spread of the old policy's
  scores and lengths: ``tpo/{logp_sum,logp_mean,length}_{std,range}`` (group means); ``tpo_records``
  keeps per-completion ℓ_sum, ℓ_mean, length, truncated and reward of the first and the latest generation.

Completions whose every reward function returned None get the group's mean score (no signal), as GRPO
zeroes their advantage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from trl import GRPOConfig, GRPOTrainer

from . import torch_ops as T

__all__ = ["TargetPOConfig", "TargetPOTrainer", "gather_with_grad", "SEQUENCE_SCORES", "KL_LOSS_TYPES"]

SEQUENCE_SCORES = ("mean", "sum")
KL_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")  # GRPOTrainer's aggregations the KL term follows


@dataclass
class TargetPOConfig(GRPOConfig):
    r"""``GRPOConfig`` plus TPO's knobs.

    Args:
        eta: temperature η > 0 of the target :math:`q \propto p_{old}\,e^{u/\eta}` (paper default 1).
        sequence_logp: ``"mean"`` (default: mean token log-prob, the author's TRL trainer's default and the one
            whose target moves on a real LM in our runs) or ``"sum"`` (the paper's definition: ℓ = Σ_t log π).
        tpo_mode: ``"exact"`` (group cross-entropy, any number of iterations) or ``"decomposed"``
            (per-sequence weights K (q - p_old), exact for one optimizer step per generation).
        beta: KL coefficient to a reference model (GRPOTrainer's k3 term, added to TPO's loss); default 0.
    """

    eta: float = field(default=1.0, metadata={"help": "TPO temperature eta > 0: q ∝ p_old exp(u/eta)."})
    sequence_logp: str = field(
        default="mean",
        metadata={
            "help": "'mean' (default; mean token log-prob) or 'sum' (the paper's: the completion's log-probability)."
        },
    )
    tpo_mode: str = field(default="exact", metadata={"help": "'exact' or 'decomposed'."})

    def __post_init__(self):
        super().__post_init__()
        T.check_eta(self.eta)
        if self.sequence_logp not in SEQUENCE_SCORES:
            raise ValueError(f"sequence_logp must be 'mean' or 'sum', got {self.sequence_logp!r}")
        if self.tpo_mode not in ("exact", "decomposed"):
            raise ValueError(f"tpo_mode must be 'exact' or 'decomposed', got {self.tpo_mode!r}")
        if not (isinstance(self.beta, (int, float)) and self.beta >= 0):
            raise ValueError(f"beta must be a number >= 0, got {self.beta!r}")
        if self.beta > 0 and self.loss_type not in KL_LOSS_TYPES:
            raise ValueError(
                f"beta > 0 adds GRPOTrainer's KL term aggregated by loss_type, which must then be one "
                f"of {', '.join(KL_LOSS_TYPES)}; got loss_type={self.loss_type!r}"
            )


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` from every process in rank order, differentiably (identity on one process)."""
    if (
        not (torch.distributed.is_available() and torch.distributed.is_initialized())
        or torch.distributed.get_world_size() == 1
    ):
        return x
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(x), dim=0)


def _shuffle_groups(batch: dict, group_ids: torch.Tensor) -> dict:
    """Permute whole groups (rows of one group stay together, in order)."""
    n = group_ids.shape[0]
    index = T.group_index(group_ids.tolist())  # [G, K], groups in order of appearance
    perm = index[torch.randperm(index.shape[0])].reshape(-1)

    def permute(v):
        if v is None or (isinstance(v, torch.Tensor) and v.ndim == 0):
            return v
        if isinstance(v, torch.Tensor):
            return v[perm.to(v.device)] if v.shape[0] == n else v
        if isinstance(v, (list, tuple)) and len(v) == n:
            return [v[i] for i in perm.tolist()]
        return v

    return {k: permute(v) for k, v in batch.items()}


class TargetPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose update is TPO's (see the module docstring). Same constructor as ``GRPOTrainer``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, TargetPOConfig):
            raise ValueError("args must be a TargetPOConfig (eta, sequence_logp, tpo_mode)")
        k = self.num_generations
        per_device = self.args.per_device_train_batch_size
        self._tpo_spans_processes = per_device % k != 0
        if self._tpo_spans_processes:
            if self.args.tpo_mode == "exact" and self.args.steps_per_generation != 1:
                raise ValueError(
                    f"per_device_train_batch_size={per_device} is not a multiple of num_generations={k}: "
                    "groups span processes, which tpo_mode='exact' supports only with "
                    "steps_per_generation=1 (or use tpo_mode='decomposed')"
                )
        if self.args.tpo_mode == "decomposed" and (
            self.num_iterations != 1 or self.args.steps_per_generation != self.args.gradient_accumulation_steps
        ):
            raise ValueError(
                "tpo_mode='decomposed' is exact only for one optimizer step per generation: set "
                "num_iterations=1 and steps_per_generation=gradient_accumulation_steps, or use 'exact'"
            )
        self._tpo_last_rewards = None
        self.tpo_records = {"first": None, "last": None}  # per-completion records (see the docstring)
        self._tpo_recorded_groups: set = set()

    # ---- rewards kept per group ---------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._tpo_last_rewards = rewards_per_func  # [N_global, n_funcs], all processes
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        rewards_per_func = self._tpo_last_rewards
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        scores = (rewards_per_func * weights).nansum(dim=1)
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        k = self.num_generations if self.model.training else self.num_generations_eval
        if bool(unscorable.any()):
            grouped = torch.where(unscorable, torch.nan, scores).view(-1, k)
            fill = torch.nanmean(grouped, dim=1, keepdim=True).nan_to_num(0.0).expand_as(grouped).reshape(-1)
            scores = torch.where(unscorable, fill, scores)
        n_local = output["completion_ids"].shape[0]
        start = self.accelerator.process_index * n_local
        rows = torch.arange(start, start + n_local, device=scores.device)
        output["tpo_scores"] = scores[rows]
        output["tpo_group_id"] = rows // k  # RepeatSampler: groups contiguous globally
        eos = torch.tensor(self.eos_token_ids, device=output["completion_ids"].device)
        output["tpo_truncated"] = ~torch.isin(output["completion_ids"], eos).any(-1)
        output.pop("advantages", None)
        if self.model.training:  # a new generation: records start afresh
            self._tpo_recorded_groups = set()
        if self.args.tpo_mode == "decomposed":
            output = self._attach_sequence_weights(output, k)
        return output

    def _old_per_token_logps(self, inputs):
        if inputs.get("old_per_token_logps") is not None:
            return inputs["old_per_token_logps"]
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        with torch.no_grad():
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model,
                input_ids,
                attention_mask,
                inputs["completion_ids"].size(1),
                batch_size=self.args.per_device_train_batch_size,
            )
        return logps

    def _attach_sequence_weights(self, output, k):
        """Decomposed mode: w = K (q - p_old) per row, from the whole (gathered) generation batch."""
        old = self._old_per_token_logps(output)
        output["old_per_token_logps"] = old
        mask = self._loss_mask(output)
        gather = self.accelerator.gather
        rows = {key: gather(x) for key, x in self._row_scores(old, mask).items()}
        all_scores, all_gid = gather(output["tpo_scores"].double()), gather(output["tpo_group_id"])
        all_valid = gather(mask.sum(-1) > 0)
        index = T.group_index(all_gid.tolist())
        w = T.tpo_sequence_weights(rows[self.args.sequence_logp], all_scores, index, self.args.eta, valid=all_valid)
        n_local = mask.shape[0]
        start = self.accelerator.process_index * n_local
        output["tpo_weights"] = w[start : start + n_local]  # float64, like the group maths
        self._log_diagnostics(index, rows, all_scores, all_valid)
        return output

    # ---- groups, not rows, shuffled --------------------------------------------------------------
    def _prepare_inputs(self, generation_batch):
        import trl.trainer.grpo_trainer as grpo_module

        original = grpo_module.shuffle_sequence_dict
        spans = self._tpo_spans_processes

        def shuffle_groups(batch):
            if spans:  # groups cross process boundaries: keep the order (steps_per_generation 1)
                return batch
            return _shuffle_groups(batch, batch["tpo_group_id"])

        grpo_module.shuffle_sequence_dict = shuffle_groups
        try:
            return super()._prepare_inputs(generation_batch)
        finally:
            grpo_module.shuffle_sequence_dict = original

    # ---- the group loss -------------------------------------------------------------------------
    @staticmethod
    def _loss_mask(inputs):
        mask = inputs["completion_mask"]
        return mask if "tool_mask" not in inputs else mask * inputs["tool_mask"]

    def _row_scores(self, token_logps, mask) -> dict:
        """Per row: ℓ_sum and ℓ_mean (float64) and the length of the loss mask (1-D, so they gather)."""
        token_logps = token_logps.detach().double()
        return {
            "sum": T.sequence_logp(token_logps, mask, "sum"),
            "mean": T.sequence_logp(token_logps, mask, "mean"),
            "length": mask.sum(-1).double(),
        }

    def _log_diagnostics(self, index, rows, scores, valid):
        """TPO's target diagnostics (float64, the configured score) and the spread of the old policy's
        sequence scores and lengths inside each group; ``rows`` from :meth:`_row_scores`, ``index`` ``[G, K]``."""
        mode = "train" if self.model.training else "eval"
        v = valid[index]
        metrics = T.tpo_diagnostics(rows[self.args.sequence_logp][index], scores.double()[index], self.args.eta, v)
        for name, key in (("logp_sum", "sum"), ("logp_mean", "mean"), ("length", "length")):
            metrics[f"{name}_std"], metrics[f"{name}_range"] = T.within_group_spread(rows[key][index], v)
        for name, value in metrics.items():
            self._metrics[mode][f"tpo/{name}"].append(value)

    def _record_completions(self, inputs, old_token_logps, mask):
        """Per-completion records of each group once per generation (the first iteration that sees it)."""
        gid = inputs["tpo_group_id"].tolist()
        new = [i for i, g in enumerate(gid) if g not in self._tpo_recorded_groups]
        if not new:
            return
        r = self._row_scores(old_token_logps, mask)
        ell_sum, ell_mean, lengths = r["sum"].tolist(), r["mean"].tolist(), r["length"].tolist()
        truncated = inputs["tpo_truncated"].tolist()
        scores = inputs["tpo_scores"].tolist()
        rows = [
            {
                "group": int(gid[i]),
                "logp_sum": ell_sum[i],
                "logp_mean": ell_mean[i],
                "length": int(lengths[i]),
                "truncated": bool(truncated[i]),
                "reward": float(scores[i]),
            }
            for i in new
        ]
        if not self._tpo_recorded_groups:  # the first rows of a new generation
            if self.tpo_records["last"] is not None and self.tpo_records["first"] is None:
                self.tpo_records["first"] = self.tpo_records["last"]
            self.tpo_records["last"] = []
        self.tpo_records["last"].extend(rows)
        self._tpo_recorded_groups.update(gid[i] for i in new)

    def completion_records(self) -> dict:
        """``{"first": [...], "last": [...]}``: per-completion ℓ_sum, ℓ_mean, length, truncated, reward (this
        process's rows) of the first and the latest generation trained on."""
        first = self.tpo_records["first"] if self.tpo_records["first"] is not None else self.tpo_records["last"]
        return {"first": first, "last": self.tpo_records["last"]}

    def _kl_term(self, per_token_logps, old_token_logps, inputs, mask, mode):
        """GRPOTrainer's KL term: β · k3(π_ref ‖ π) per token (times the importance ratio when
        ``use_bias_correction_kl``), aggregated by ``loss_type`` as ``GRPOTrainer._compute_loss`` does."""
        ref = inputs["ref_per_token_logps"]
        per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
        if self.args.use_bias_correction_kl:
            log_ratio = per_token_logps - old_token_logps
            if self.importance_sampling_level == "sequence":
                log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
            per_token_kl = per_token_kl * torch.exp(log_ratio)
        term = self.beta * per_token_kl * mask
        steps = getattr(self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)
        accumulation = steps if mode == "train" else 1.0
        if self.loss_type == "grpo":
            kl = (term.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accumulation
        elif self.loss_type == "bnpo":
            kl = term.sum() / mask.sum().clamp(min=1.0) / accumulation
        elif self.loss_type == "dr_grpo":
            kl = term.sum() / (term.size(0) * self.max_completion_length) / accumulation
        elif self.loss_type == "dapo":
            normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if mode == "train":
                normalizer = normalizer * steps / self.args.steps_per_generation
            kl = term.sum() / normalizer
        else:  # "luspo"
            kl = term.sum(-1).mean() / accumulation
        total = self.accelerator.reduce(
            torch.stack([(per_token_kl * mask).sum(), mask.sum().float()]).detach(), reduction="sum"
        )
        self._metrics[mode]["kl"].append((total[0] / total[1].clamp(min=1.0)).item())
        return kl

    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        mask = self._loss_mask(inputs)
        valid = mask.sum(-1) > 0  # all-masked rows leave the group softmax
        per_token_logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True
        )
        # the group maths in float64: the cast's backward returns the gradient in the model's dtype
        seq = T.sequence_logp(per_token_logps.double(), mask, self.args.sequence_logp)
        accumulation = getattr(self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)
        normalizer = accumulation if mode == "train" else 1.0
        old = inputs.get("old_per_token_logps")
        old = per_token_logps.detach() if old is None else old

        if self.args.tpo_mode == "decomposed" and mode == "train":
            loss = -(inputs["tpo_weights"].detach().double() * seq).mean()
        else:
            rows = self._row_scores(old, mask)
            scores, gid = inputs["tpo_scores"].double(), inputs["tpo_group_id"]
            if self._tpo_spans_processes:
                gather = self.accelerator.gather
                seq = gather_with_grad(seq)
                rows = {key: gather(x) for key, x in rows.items()}
                scores, gid, valid = gather(scores), gather(gid), gather(valid)
            index = T.group_index(gid.tolist(), group_size=self.num_generations if mode == "train" else None)
            loss = T.tpo_loss(
                seq[index], rows[self.args.sequence_logp][index], scores[index], self.args.eta, valid[index]
            )
            if self.args.tpo_mode == "exact":
                self._log_diagnostics(index, rows, scores, valid)
        loss = loss.to(per_token_logps.dtype) / normalizer
        self._metrics[mode]["tpo/loss"].append(loss.detach().item() * normalizer)
        if mode == "train":
            self._record_completions(inputs, old, mask)
        if self.beta != 0.0:
            loss = loss + self._kl_term(per_token_logps, old, inputs, mask, mode)
        total = self.accelerator.reduce(
            torch.stack([(entropies * mask).sum(), mask.sum().float()]).detach(), reduction="sum"
        )
        self._metrics[mode]["entropy"].append((total[0] / total[1].clamp(min=1.0)).item())
        return loss
