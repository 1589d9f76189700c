"""TargetPOTrainer's sequence score, masked rows, float64 group maths, KL term and logging.

Every expected value is computed here, independently of the bridge: numpy closed forms of TPO's target and
loss on per-row sequence scores from an independent forward pass, and TRL's own ``GRPOTrainer`` for the KL.
"""

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the bridge needs PyTorch: pip install 'tpo_core[torch]'")
pytest.importorskip("trl", reason="TRL tests need trl: pip install 'tpo_core[trl]'")

from tests.test_bridge_trl import _count_good, _make_trainer  # noqa: E402
from tpo_core.lab.llm.common import tiny_llama  # noqa: E402


def _np_tpo(ell_old, ell, scores, eta):
    """TPO on one group in numpy float64: q, p_old and the cross-entropy −Σ q log softmax(ell)."""
    ell_old, ell, scores = (np.asarray(x, np.float64) for x in (ell_old, ell, scores))
    c = scores - scores.mean()
    sd = np.sqrt((c * c).mean())
    u = c / sd if sd > 1e-6 else c
    p_old = np.exp(ell_old - ell_old.max())
    p_old /= p_old.sum()
    q = p_old * np.exp(u / eta)
    q /= q.sum()
    log_p = ell - ell.max() - np.log(np.exp(ell - ell.max()).sum())
    return q, p_old, float(-(q * log_p).sum())


def _generation(trainer):
    trainer.model.train()
    return trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))


def _independent_rows(trainer, inputs):
    """Per-row token-sum and token-mean log-probs and lengths from a plain forward pass (float64 after it)."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    t = inputs["completion_ids"].shape[1]
    with torch.no_grad():
        logits = trainer.model(input_ids=ids, attention_mask=att).logits[:, -t - 1 : -1].double()
    tok = torch.log_softmax(logits, -1).gather(-1, inputs["completion_ids"][..., None]).squeeze(-1).numpy()
    m = inputs["completion_mask"].double().numpy()
    total, length = (tok * m).sum(-1), m.sum(-1)
    return total, total / np.maximum(length, 1.0), length


@pytest.mark.parametrize("score", ["sum", "mean"])
def test_sequence_score_from_the_config_reaches_the_loss_and_the_spread_is_logged(tmp_path, score):
    trainer = _make_trainer(tmp_path, tpo_mode="exact", sequence_logp=score, eta=0.7)
    inputs = _generation(trainer)
    k = trainer.num_generations
    ell_sum, ell_mean, length = _independent_rows(trainer, inputs)
    ell = ell_sum if score == "sum" else ell_mean
    scores = np.array(
        [
            _count_good([trainer.processing_class.decode(c[m.bool()])])[0]
            for c, m in zip(inputs["completion_ids"], inputs["completion_mask"])
        ]
    )
    order = np.argsort(inputs["tpo_group_id"].numpy(), kind="stable")  # rows arrive as whole groups
    groups = [order[g * k : (g + 1) * k] for g in range(len(order) // k)]
    expected = np.mean([_np_tpo(ell[i], ell[i], scores[i], 0.7)[2] for i in groups])
    loss = trainer._compute_loss(trainer.model, inputs).item() * trainer.args.gradient_accumulation_steps
    assert loss == pytest.approx(expected, rel=1e-5, abs=1e-6)
    other = ell_mean if score == "sum" else ell_sum  # the two scores give other losses
    assert abs(np.mean([_np_tpo(other[i], other[i], scores[i], 0.7)[2] for i in groups]) - expected) > 1e-3
    m = trainer._metrics["train"]
    for name, x in (("logp_sum", ell_sum), ("logp_mean", ell_mean), ("length", length)):
        assert m[f"tpo/{name}_std"][-1] == pytest.approx(np.mean([x[i].std() for i in groups]), rel=1e-5, abs=1e-7)
        assert m[f"tpo/{name}_range"][-1] == pytest.approx(np.mean([np.ptp(x[i]) for i in groups]), rel=1e-5, abs=1e-7)


def test_default_sequence_score_is_the_mean_and_sum_is_one_flag_away(tmp_path):
    from tpo_core.bridge.trl import TargetPOConfig

    base = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, report_to=[], use_cpu=True)
    assert TargetPOConfig(**base).sequence_logp == "mean"
    assert TargetPOConfig(sequence_logp="sum", **base).sequence_logp == "sum"
    with pytest.raises(ValueError, match="beta"):
        TargetPOConfig(beta=-1.0, **base)
    with pytest.raises(ValueError, match="loss_type"):
        TargetPOConfig(beta=0.01, loss_type="cispo", **base)


@pytest.mark.parametrize("mode", ["exact", "decomposed"])
def test_all_masked_rows_leave_the_group_softmax(tmp_path, mode):
    """``mask_truncated_completions=True`` zeroes truncated rows' masks: they must get no mass and not change
    the other rows' target; the loss equals TPO on each group without them."""
    trainer = _make_trainer(
        tmp_path, tpo_mode=mode, sequence_logp="sum", mask_truncated_completions=True, max_completion_length=3
    )
    inputs = _generation(trainer)
    k = trainer.num_generations
    masked = (inputs["completion_mask"].sum(-1) == 0).numpy()
    assert masked.any() and not masked.all()  # some rows truncated, some not
    ell_sum, _, _ = _independent_rows(trainer, inputs)
    scores = inputs["tpo_scores"].double().numpy()
    order = np.argsort(inputs["tpo_group_id"].numpy(), kind="stable")
    groups = [order[g * k : (g + 1) * k] for g in range(len(order) // k)]
    kept = [i[~masked[i]] for i in groups]
    kept = [i for i in kept if len(i)]
    expected = np.mean([_np_tpo(ell_sum[i], ell_sum[i], scores[i], 1.0)[2] for i in kept])
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, inputs)
    if mode == "exact":
        assert loss.item() * trainer.args.gradient_accumulation_steps == pytest.approx(expected, rel=1e-5, abs=1e-6)
    else:  # per-row weights K (q − p_old): zero on masked rows, closed form else
        w = inputs["tpo_weights"].numpy()
        assert np.all(w[masked] == 0.0)
        for _, i in zip(groups, kept):
            q, p_old, _ = _np_tpo(ell_sum[i], ell_sum[i], scores[i], 1.0)
            np.testing.assert_allclose(w[i], k * (q - p_old), rtol=1e-6, atol=1e-9)
    # the op-level statement: adding an all-masked row changes no other q and gets none of it
    from tpo_core.bridge import torch_ops as T

    ell, s = torch.tensor([[-3.0, -9.0, -5.0, 0.0]], dtype=torch.float64), torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    q_valid = T.tpo_target(ell, s, 1.0, torch.tensor([[True, True, True, False]]))
    q_ref, _, _ = _np_tpo([-3.0, -9.0, -5.0], [-3.0, -9.0, -5.0], [1.0, 0.0, 0.0], 1.0)
    np.testing.assert_allclose(q_valid[0, :3].numpy(), q_ref, rtol=1e-12)
    assert q_valid[0, 3].item() == 0.0


def test_group_maths_in_float64_keeps_the_gradient_direction_at_tiny_tv(tmp_path, monkeypatch):
    """Summed log-probs 20–30 nats apart and one success far down the group: TV(q, p_old) ≈ 1e-9. The trainer's
    gradient with respect to an f32 model's token log-probs points where float64 says; plain f32 maths does not."""
    trainer = _make_trainer(tmp_path, tpo_mode="exact", sequence_logp="sum")
    inputs = _generation(trainer)
    n, t = inputs["completion_ids"].shape
    k = trainer.num_generations
    gen = torch.Generator().manual_seed(1)
    seq_target = torch.zeros(n, dtype=torch.float64)
    for g in range(n // k):  # one dominant completion, the rest 20–30 nats below
        seq_target[g * k : (g + 1) * k] = torch.tensor(
            [-2.0, *(-20.0 - 10.0 * torch.rand(k - 1, generator=gen))], dtype=torch.float64
        )
    mask = inputs["completion_mask"].clone()
    mask[:, 0] = 1
    inputs["completion_mask"] = mask
    lengths = mask.sum(-1, keepdim=True).double()
    token = (seq_target[:, None] / lengths * mask).float().requires_grad_(True)  # f32 leaf, as a model's output
    scores = torch.zeros(n)
    scores[1::k] = 1.0  # the success is an improbable completion
    inputs["tpo_scores"] = scores
    inputs["tpo_group_id"] = torch.arange(n) // k
    inputs.pop("old_per_token_logps", None)

    def fake_logps(self, model, input_ids, attention_mask, logits_to_keep, **kwargs):
        return token, torch.zeros_like(token.detach()), None

    monkeypatch.setattr(type(trainer), "_get_per_token_logps_and_entropies", fake_logps)
    trainer._compute_loss(trainer.model, inputs).backward()
    got = token.grad.double()
    # float64 reference: ∂L/∂token_{r,t} = m_{r,t} (p_r − q_r) / G, with ℓ from the f32 tokens themselves
    ell = (token.detach().double() * mask).sum(-1)
    ref = torch.zeros(n, dtype=torch.float64)
    tvs = []
    for g in range(n // k):
        i = slice(g * k, (g + 1) * k)
        q, p_old, _ = _np_tpo(ell[i].numpy(), ell[i].numpy(), scores[i].numpy(), 1.0)
        ref[i] = torch.tensor(p_old - q) / (n // k)
        tvs.append(0.5 * np.abs(q - p_old).sum())
    assert 1e-11 < np.median(tvs) < 1e-7
    ref_tok = ref[:, None] * mask
    cos = lambda a, b: float((a * b).sum() / (a.norm() * b.norm()))  # noqa: E731
    assert cos(got, ref_tok) > 0.999
    # the contrast: the same loss with its group maths in float32 loses the direction
    from tpo_core.bridge import torch_ops as T

    leaf = token.detach().clone().requires_grad_(True)
    seq32 = (leaf * mask).sum(-1).view(-1, k)
    T.tpo_loss(seq32, seq32.detach(), scores.view(-1, k), 1.0).backward()
    assert cos(leaf.grad.double(), ref_tok) < 0.99


def test_kl_term_equals_grpo_trainers_own_on_the_same_inputs(tmp_path, monkeypatch):
    """β > 0: the KL added to TPO's loss is GRPOTrainer's (k3, bias-corrected, ``dapo`` aggregation), computed by
    GRPOTrainer itself on the same batch with zero advantages (its policy term is then exactly zero)."""
    import trl.trainer.grpo_trainer as grpo_module
    from trl import GRPOConfig, GRPOTrainer

    def reference_model(*args, **kwargs):  # the in-memory test model has no path to reload
        return tiny_llama(0, max_position_embeddings=64)

    monkeypatch.setattr(grpo_module, "create_model_from_path", reference_model)

    trainer = _make_trainer(tmp_path, tpo_mode="exact", sequence_logp="mean", beta=0.05, num_iterations=2)
    with torch.no_grad():  # move the policy away from the reference model
        gen = torch.Generator().manual_seed(0)
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    inputs = _generation(trainer)
    assert inputs.get("ref_per_token_logps") is not None
    with torch.no_grad():  # an old policy a little off the current one
        inputs["old_per_token_logps"] = inputs["old_per_token_logps"] + 0.01
    with_kl = trainer._compute_loss(trainer.model, inputs).item()
    trainer.beta = 0.0
    without = trainer._compute_loss(trainer.model, inputs).item()
    tpo_kl = with_kl - without
    grpo_args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=6,
        beta=0.05,
        num_iterations=2,
        report_to=[],
        use_cpu=True,
        bf16=False,
        learning_rate=5e-3,
        seed=0,
    )
    grpo = GRPOTrainer(
        model=copy.deepcopy(trainer.model),
        reward_funcs=_count_good,
        args=grpo_args,
        train_dataset=trainer.train_dataset,
        processing_class=trainer.processing_class,
    )
    grpo.model.train()
    grpo.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps  # set by train() otherwise
    grpo_inputs = dict(inputs, advantages=torch.zeros(inputs["completion_ids"].shape[0]))
    grpo_kl = grpo._compute_loss(grpo.model, grpo_inputs).item()
    assert grpo_kl > 1e-4  # a real KL, not 0 = 0
    assert tpo_kl == pytest.approx(grpo_kl, rel=1e-4)
    assert trainer._metrics["train"]["kl"][-1] == pytest.approx(grpo._metrics["train"]["kl"][-1], rel=1e-5)


def test_trainer_keeps_per_completion_records_of_the_first_and_last_generation(tmp_path):
    trainer = _make_trainer(tmp_path, tpo_mode="exact", max_steps=3)
    trainer.train()
    records = trainer.completion_records()
    n = trainer.args.per_device_train_batch_size
    for which in ("first", "last"):
        rows = records[which]
        assert len(rows) == n
        assert len({r["group"] for r in rows}) == n // trainer.num_generations
        for r in rows:
            assert set(r) == {"group", "logp_sum", "logp_mean", "length", "truncated", "reward"}
            assert r["logp_mean"] * max(r["length"], 1) == pytest.approx(r["logp_sum"], rel=1e-9, abs=1e-9)
            assert r["logp_sum"] <= 0.0 and 0 <= r["length"] <= trainer.args.max_completion_length
            if r["length"] < trainer.args.max_completion_length:  # ended early: it ended with EOS
                assert not r["truncated"]
    assert records["first"] != records["last"]  # three generations apart
    logs = [e for e in trainer.state.log_history if "loss" in e]
    assert all("grad_norm" in e and np.isfinite(e["grad_norm"]) for e in logs)
