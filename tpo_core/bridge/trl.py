"""TPO for TRL: ``TargetPOConfig`` and ``TargetPOTrainer`` on top of TRL's ``GRPOTrainer`` (tested with trl 1.16.0).

Target Policy Optimization (Kaddour 2026, arXiv 2604.06159): per prompt, K completions with scores s;
u = group z-score (population std, u = c if σ ≤ 1e-6); target q = softmax(log softmax(ℓ_old) + u/η)
frozen; loss the cross-entropy -Σ q log softmax(ℓ(θ)) over the group, ℓ the completion's token-SUM
log-prob. (TRL's own ``trl.experimental.tpo`` is an unrelated "Triple Preference Optimization".)

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
* **diagnostics** logged as ``tpo/entropy_p_old``, ``tpo/entropy_q``, ``tpo/tv``, ``tpo/kl_q_p_old``,
  ``tpo/zero_variance_frac``, ``tpo/argmax_moved_frac``.

No reference-model KL (``beta = 0`` by default: TPO's anchor is p_old inside q). Completions whose
every reward function returned None get the group's mean score (no signal), as GRPO zeroes their advantage.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from trl import GRPOConfig, GRPOTrainer

from . import torch_ops as T

__all__ = ["TargetPOConfig", "TargetPOTrainer", "gather_with_grad"]


@dataclass
class TargetPOConfig(GRPOConfig):
    r"""``GRPOConfig`` plus TPO's knobs.

    Args:
        eta: temperature η > 0 of the target :math:`q \propto p_{old}\,e^{u/\eta}` (paper default 1).
        sequence_logp: ``"sum"`` (the paper: ℓ = Σ_t log π, the completion's log-probability) or ``"mean"``
            (length-normalised ablation).
        tpo_mode: ``"exact"`` (group cross-entropy, any number of iterations) or ``"decomposed"``
            (per-sequence weights K (q - p_old), exact for one optimizer step per generation).
        beta: KL coefficient to a reference model; 0 for TPO.
    """

    eta: float = field(default=1.0, metadata={"help": "TPO temperature eta > 0: q ∝ p_old exp(u/eta)."})
    sequence_logp: str = field(default="sum", metadata={"help": "'sum' (paper) or 'mean' token log-probs."})
    tpo_mode: str = field(default="exact", metadata={"help": "'exact' or 'decomposed'."})
    beta: float = field(default=0.0, metadata={"help": "KL to a reference model; TPO uses none."})

    def __post_init__(self):
        super().__post_init__()
        T.check_eta(self.eta)
        if self.sequence_logp not in ("sum", "mean"):
            raise ValueError(f"sequence_logp must be 'sum' or 'mean', got {self.sequence_logp!r}")
        if self.tpo_mode not in ("exact", "decomposed"):
            raise ValueError(f"tpo_mode must be 'exact' or 'decomposed', got {self.tpo_mode!r}")


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` from every process in rank order, differentiably (identity on one process)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()) \
            or torch.distributed.get_world_size() == 1:
        return x
    from torch.distributed.nn.functional import all_gather
    return torch.cat(all_gather(x), dim=0)


def _shuffle_groups(batch: dict, group_ids: torch.Tensor) -> dict:
    """Permute whole groups (rows of one group stay together, in order)."""
    n = group_ids.shape[0]
    index = T.group_index(group_ids.tolist())                       # [G, K], groups in order of appearance
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
                raise ValueError(f"per_device_train_batch_size={per_device} is not a multiple of num_generations={k}: "
                                 "groups span processes, which tpo_mode='exact' supports only with "
                                 "steps_per_generation=1 (or use tpo_mode='decomposed')")
        if self.args.tpo_mode == "decomposed" and (self.num_iterations != 1 or self.args.steps_per_generation
                                                    != self.args.gradient_accumulation_steps):
            raise ValueError("tpo_mode='decomposed' is exact only for one optimizer step per generation: set "
                             "num_iterations=1 and steps_per_generation=gradient_accumulation_steps, or use 'exact'")
        self._tpo_last_rewards = None

    # ---- rewards kept per group ---------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._tpo_last_rewards = rewards_per_func                       # [N_global, n_funcs], all processes
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
        output["tpo_group_id"] = rows // k                             # RepeatSampler: groups contiguous globally
        output.pop("advantages", None)
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
                self.model, input_ids, attention_mask, inputs["completion_ids"].size(1),
                batch_size=self.args.per_device_train_batch_size)
        return logps

    def _attach_sequence_weights(self, output, k):
        """Decomposed mode: w = K (q - p_old) per row, from the whole (gathered) generation batch."""
        old = self._old_per_token_logps(output)
        output["old_per_token_logps"] = old
        mask = self._loss_mask(output)
        seq_old = T.sequence_logp(old, mask, self.args.sequence_logp)
        all_seq_old = self.accelerator.gather(seq_old)
        all_scores = self.accelerator.gather(output["tpo_scores"])
        all_gid = self.accelerator.gather(output["tpo_group_id"])
        w = T.tpo_sequence_weights(all_seq_old.float(), all_scores.float(), all_gid.tolist(), self.args.eta)
        n_local = seq_old.shape[0]
        start = self.accelerator.process_index * n_local
        output["tpo_weights"] = w[start:start + n_local].to(seq_old.dtype)
        self._log_diagnostics(all_seq_old, all_scores, all_gid)
        return output

    # ---- groups, not rows, shuffled --------------------------------------------------------------
    def _prepare_inputs(self, generation_batch):
        import trl.trainer.grpo_trainer as grpo_module

        original = grpo_module.shuffle_sequence_dict
        spans = self._tpo_spans_processes

        def shuffle_groups(batch):
            if spans:                     # groups cross process boundaries: keep the order (steps_per_generation 1)
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

    def _log_diagnostics(self, seq_old, scores, group_ids):
        mode = "train" if self.model.training else "eval"
        index = T.group_index(group_ids.tolist())
        diag = T.tpo_diagnostics(seq_old.detach().float()[index], scores.float()[index], self.args.eta)
        for name, value in diag.items():
            self._metrics[mode][f"tpo/{name}"].append(value)

    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        mask = self._loss_mask(inputs)
        per_token_logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True)
        seq = T.sequence_logp(per_token_logps, mask, self.args.sequence_logp)
        accumulation = getattr(self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)
        normalizer = accumulation if mode == "train" else 1.0

        if self.args.tpo_mode == "decomposed" and mode == "train":
            loss = -(inputs["tpo_weights"].detach() * seq).mean()
        else:
            old = inputs.get("old_per_token_logps")
            old = per_token_logps.detach() if old is None else old
            seq_old = T.sequence_logp(old, mask, self.args.sequence_logp).detach()
            scores, gid = inputs["tpo_scores"], inputs["tpo_group_id"]
            if self._tpo_spans_processes:
                seq = gather_with_grad(seq)
                seq_old = self.accelerator.gather(seq_old)
                scores, gid = self.accelerator.gather(scores), self.accelerator.gather(gid)
            index = T.group_index(gid.tolist(), group_size=self.num_generations if mode == "train" else None)
            loss = T.tpo_loss(seq[index], seq_old[index], scores.to(seq.dtype)[index], self.args.eta)
            if self.args.tpo_mode == "exact":
                self._log_diagnostics(seq_old, scores, gid)
        loss = loss / normalizer
        total = self.accelerator.reduce(torch.stack([(entropies * mask).sum(), mask.sum().float()]).detach(),
                                        reduction="sum")
        self._metrics[mode]["entropy"].append((total[0] / total[1].clamp(min=1.0)).item())
        self._metrics[mode]["tpo/loss"].append(loss.detach().item() * normalizer)
        return loss
