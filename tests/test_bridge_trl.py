"""tpo_core.bridge.trl: a two-process (gloo) test of the autograd all-gather, and TargetPOTrainer smoke runs.

The two-process expected gradient is built in the parent from the JAX engine's q, never by the bridge.
"""

import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the bridge needs PyTorch: pip install 'tpo_core[torch]'")
pytest.importorskip("trl", reason="TRL tests need trl: pip install 'tpo_core[trl]'")

import jax.numpy as jnp  # noqa: E402

from tpo_core import losses as L  # noqa: E402
from tpo_core.lab.llm.common import SPECIAL_TOKENS, tiny_llama, word_tokenizer  # noqa: E402

K, GROUPS, D, ETA = 4, 3, 5, 0.7  # 12 rows over 2 ranks of 6: the middle group spans both ranks


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WORKER = textwrap.dedent("""
    import os, sys
    import numpy as np
    import torch
    import torch.distributed as dist
    from tpo_core.bridge import torch_ops as T
    from tpo_core.bridge.trl import gather_with_grad

    rank, world, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"], rank=rank, world_size=world)
    data = np.load(os.environ["DATA"])
    n_local = data["x"].shape[0] // world
    rows = slice(rank * n_local, (rank + 1) * n_local)
    torch.manual_seed(0)                                   # same init on every rank, as DDP broadcasts
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(data["x"].shape[1], 1, bias=False).double())
    with torch.no_grad():
        model.module.weight.copy_(torch.tensor(data["w0"]))
    x = torch.tensor(data["x"][rows])
    seq = model(x).squeeze(-1)                             # stands in for the token-sum log-prob of each local row
    seq_all = gather_with_grad(seq)                        # differentiable all-gather: groups span the ranks
    old_all = torch.tensor(data["x"]) @ torch.tensor(data["w0"]).reshape(-1)
    scores_all = torch.tensor(data["scores"])
    gid_all = torch.arange(len(scores_all)) // int(data["k"])
    index = T.group_index(gid_all.tolist(), group_size=int(data["k"]))
    loss = T.tpo_loss(seq_all[index], old_all[index], scores_all[index], float(data["eta"]))
    loss.backward()                                        # DDP all-reduces (averages) the parameter gradient
    np.save(out, model.module.weight.grad.numpy())
    dist.destroy_process_group()
""")


def test_two_process_all_gather_gives_the_full_batch_gradient(tmp_path):
    rng = np.random.default_rng(0)
    n = K * GROUPS
    x, w0 = rng.normal(size=(n, D)), rng.normal(size=(1, D))
    scores = rng.integers(0, 2, n).astype(np.float64)
    scores[K : 2 * K] = [1.0, 0.0, 0.0, 1.0]  # the spanning group carries signal
    data = tmp_path / "data.npz"
    np.savez(data, x=x, w0=w0, scores=scores, k=K, eta=ETA)
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {
        **os.environ,
        "PORT": str(_free_port()),
        "DATA": str(data),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), "2", str(tmp_path / f"g{r}.npy")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    logs = [p.communicate(timeout=240)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)[-4000:]
    g0, g1 = np.load(tmp_path / "g0.npy"), np.load(tmp_path / "g1.npy")
    np.testing.assert_array_equal(g0, g1)  # DDP: every rank holds the same averaged gradient
    # expected: ∇_w mean_g CE(q_g, softmax(x w)) = Σ_i (p_i - q_i)/G x_i at w = w0, q from the JAX engine
    seq = (x @ w0.reshape(-1)).reshape(GROUPS, K)
    q = np.asarray(L.tpo_target(jnp.asarray(seq), jnp.asarray(scores.reshape(GROUPS, K)), ETA), np.float64)
    p = np.exp(seq - seq.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    expected = ((p - q).reshape(-1) / GROUPS) @ x
    np.testing.assert_allclose(g0.reshape(-1), expected, rtol=1e-5, atol=1e-7)
    assert np.abs(expected).max() > 1e-3


# ---- TargetPOTrainer on a tiny local Llama and a word-level tokenizer -----------------------------
WORDS = [f"w{i}" for i in range(60)]  # + 4 special tokens = the model's 64-token vocabulary
GOOD = {f"w{i}" for i in range(20)}


def _count_good(completions, **_):
    return [float(sum(word in GOOD for word in c.split())) for c in completions]


def _make_trainer(tmp_path, **overrides):
    from datasets import Dataset

    from tpo_core.bridge.trl import TargetPOConfig, TargetPOTrainer

    tokenizer = word_tokenizer([*SPECIAL_TOKENS, *WORDS])
    model = tiny_llama(0, max_position_embeddings=64)
    rng = np.random.default_rng(0)
    prompts = [" ".join(rng.choice(WORDS, 3)) for _ in range(8)]
    settings = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=6,
        max_steps=2,
        learning_rate=5e-3,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
        eta=1.0,
        temperature=1.0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    settings.update(overrides)
    args = TargetPOConfig(**settings)
    trainer = TargetPOTrainer(
        model=model,
        reward_funcs=_count_good,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer,
    )
    return trainer


def _run_trainer(tmp_path, **overrides):
    trainer = _make_trainer(tmp_path, **overrides)
    model = trainer.model
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    moved = max((p.detach() - b).abs().max().item() for p, b in zip(model.parameters(), before))
    return trainer, moved


@pytest.mark.parametrize("mode, extra", [("exact", {"num_iterations": 2}), ("decomposed", {})])
def test_target_po_trainer_two_steps_loss_finite_and_parameters_move(tmp_path, mode, extra):
    trainer, moved = _run_trainer(tmp_path, tpo_mode=mode, **extra)
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2
    assert all(np.isfinite(entry["loss"]) for entry in logs)
    assert moved > 0.0
    assert trainer.state.global_step == 2
    assert all(f"tpo/{name}" in logs[0] for name in ("entropy_p_old", "entropy_q", "tv", "zero_variance_frac"))
    assert any(entry["reward_std"] > 0 for entry in logs)  # the groups carried signal
    assert any(entry["tpo/tv"] > 1e-4 for entry in logs)  # and the target moved away from p_old


def test_target_po_config_names_bad_parameters(tmp_path):
    from tpo_core.bridge.trl import TargetPOConfig

    base = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, report_to=[], use_cpu=True)
    with pytest.raises(ValueError, match="eta"):
        TargetPOConfig(eta=0.0, **base)
    with pytest.raises(ValueError, match="sequence_logp"):
        TargetPOConfig(sequence_logp="max", **base)
    with pytest.raises(ValueError, match="tpo_mode"):
        TargetPOConfig(tpo_mode="fast", **base)


def test_group_shuffle_keeps_groups_whole():
    from tpo_core.bridge.trl import _shuffle_groups

    gid = torch.arange(12) // 4
    batch = {
        "x": torch.arange(12),
        "names": [f"r{i}" for i in range(12)],
        "tpo_group_id": gid,
        "num_items_in_batch": torch.tensor(3),
    }
    torch.manual_seed(3)
    out = _shuffle_groups(batch, gid)
    blocks = out["x"].view(3, 4)
    assert sorted(blocks[:, 0].tolist()) == [0, 4, 8]
    assert torch.equal(blocks - blocks[:, :1], torch.arange(4).expand(3, 4))  # each group whole, in order
    assert out["names"] == [f"r{i}" for i in out["x"].tolist()]
    assert torch.equal(out["tpo_group_id"], out["x"] // 4) and out["num_items_in_batch"].item() == 3


def test_trainer_loss_is_the_engines_tpo_loss_and_decomposed_matches_exact_at_theta_old(tmp_path):
    """One generation batch through the trainer's own pipeline; the expected loss from the JAX engine."""
    trainer = _make_trainer(tmp_path, tpo_mode="exact", sequence_logp="sum")
    trainer.model.train()
    inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    assert "advantages" not in inputs  # GRPO's advantages are not used
    k, n = 4, inputs["completion_ids"].shape[0]
    gid = inputs["tpo_group_id"]
    blocks = gid.view(-1, k)
    assert torch.all(blocks == blocks[:, :1])  # rows arrive in whole groups
    # independent forward pass: token-sum log-probs of each completion
    model = trainer.model
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    t = inputs["completion_ids"].shape[1]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=att).logits[:, -t - 1 : -1].float()
    tok = torch.log_softmax(logits, -1).gather(-1, inputs["completion_ids"][..., None]).squeeze(-1)
    seq = (tok * inputs["completion_mask"]).sum(-1).view(-1, k).numpy()
    scores = np.array(
        [
            _count_good([trainer.processing_class.decode(c[m.bool()])])[0]
            for c, m in zip(inputs["completion_ids"], inputs["completion_mask"])
        ]
    ).reshape(-1, k)
    np.testing.assert_allclose(inputs["tpo_scores"].view(-1, k).numpy(), scores)
    assert scores.std(-1).max() > 0  # at least one informative group
    expected = float(L.tpo_loss(jnp.asarray(seq), jnp.asarray(seq), jnp.asarray(scores, jnp.float32), 1.0))
    model.zero_grad()
    loss = trainer._compute_loss(model, inputs)
    loss.backward()
    grad_exact = torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()])
    assert loss.item() * trainer.args.gradient_accumulation_steps == pytest.approx(expected, rel=1e-4, abs=1e-5)
    # decomposed mode on the same rows: the surrogate's gradient at θ_old is the exact one
    trainer.args.tpo_mode = "decomposed"
    inputs = trainer._attach_sequence_weights(dict(inputs), k)
    model.zero_grad()
    trainer._compute_loss(model, inputs).backward()
    grad_dec = torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()])
    assert n == 8 and grad_exact.abs().max() > 0
    torch.testing.assert_close(grad_dec, grad_exact, rtol=1e-3, atol=1e-6)


TRAINER_WORKER = textwrap.dedent("""
    import os, sys
    import numpy as np
    import torch
    import transformers
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from tpo_core.bridge.trl import TargetPOConfig, TargetPOTrainer

    out = sys.argv[1]
    rank = int(os.environ["RANK"])
    words = [f"w{i}" for i in range(60)]
    good = set(words[:20])
    vocab = {"[PAD]": 0, "[BOS]": 1, "[EOS]": 2, "[UNK]": 3, **{w: i + 4 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", bos_token="[BOS]",
                                                     eos_token="[EOS]", unk_token="[UNK]", padding_side="left")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = transformers.LlamaForCausalLM(cfg)
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(out, "init.pt"))

    def reward(completions, **_):
        return [float(sum(w in good for w in c.split())) for c in completions]

    class Recording(TargetPOTrainer):
        def _generate_and_score_completions(self, inputs):
            o = super()._generate_and_score_completions(inputs)
            keep = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "tpo_scores", "tpo_group_id")
            torch.save({k: o[k].cpu() for k in keep}, os.path.join(out, f"rows{rank}.pt"))
            return o

    # 2 rows per process, K = 4: the one group of each step spans both processes
    args = TargetPOConfig(output_dir=out, per_device_train_batch_size=2, num_generations=4, steps_per_generation=1,
                          gradient_accumulation_steps=1, max_steps=1, learning_rate=0.1, optim="sgd",
                          lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=0.0, max_completion_length=6,
                          report_to=[], save_strategy="no", use_cpu=True, bf16=False, seed=0, eta=1.0,
                          logging_steps=1, disable_tqdm=True, tpo_mode="exact", sequence_logp="sum")
    prompts = ["w1 w2 w3", "w4 w5 w6", "w7 w8 w9", "w10 w11 w12"]
    trainer = Recording(model=model, reward_funcs=reward, args=args, train_dataset=Dataset.from_dict({"prompt": prompts}),
                        processing_class=tokenizer)
    assert trainer._tpo_spans_processes
    trainer.train()
    if rank == 0:
        torch.save(trainer.model.state_dict(), os.path.join(out, "final.pt"))
""")


def test_two_process_trainer_exact_mode_update_is_the_full_group_gradient(tmp_path):
    """torchrun, 2 CPU processes (gloo), one group of 4 split 2 + 2: one SGD step equals -lr ∇ of the group loss."""

    script = tmp_path / "trainer_worker.py"
    script.write_text(TRAINER_WORKER)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        str(script),
        str(tmp_path),
    ]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, (run.stdout + run.stderr)[-5000:]
    rows = [torch.load(tmp_path / f"rows{r}.pt") for r in (0, 1)]
    assert [r["tpo_group_id"].tolist() for r in rows] == [[0, 0], [0, 0]]  # one group across the processes
    model = tiny_llama(None, max_position_embeddings=64)
    model.load_state_dict(torch.load(tmp_path / "init.pt"))
    seqs = []
    for r in rows:  # independent token-sum log-probs
        ids = torch.cat([r["prompt_ids"], r["completion_ids"]], 1)
        att = torch.cat([r["prompt_mask"], r["completion_mask"]], 1)
        t = r["completion_ids"].shape[1]
        logits = model(input_ids=ids, attention_mask=att).logits[:, -t - 1 : -1]
        tok = torch.log_softmax(logits, -1).gather(-1, r["completion_ids"][..., None]).squeeze(-1)
        seqs.append((tok * r["completion_mask"]).sum(-1))
    seq = torch.cat(seqs)
    scores = torch.cat([r["tpo_scores"] for r in rows]).float()
    assert scores.std() > 0, "the sampled group carries no signal; pick another seed"
    q = torch.tensor(
        np.asarray(L.tpo_target(jnp.asarray(seq.detach().numpy()[None]), jnp.asarray(scores.numpy()[None]), 1.0))[0]
    )
    loss = -(q * torch.log_softmax(seq, -1)).sum()
    loss.backward()
    final = torch.load(tmp_path / "final.pt")
    for name, p in model.named_parameters():
        step = p.detach() - final[name]  # SGD: θ_0 - θ_1 = lr · ∇L
        torch.testing.assert_close(step, 0.1 * p.grad, rtol=2e-3, atol=2e-7, msg=name)
    assert max(p.grad.abs().max().item() for p in model.parameters()) > 1e-4


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(tpo_mode="decomposed", num_iterations=2), "decomposed"),
        (
            dict(
                tpo_mode="exact", per_device_train_batch_size=2, steps_per_generation=2, gradient_accumulation_steps=2
            ),
            "span processes",
        ),
    ],
)
def test_trainer_refuses_configurations_where_its_loss_would_not_be_tpo(tmp_path, overrides, match):
    with pytest.raises(ValueError, match=match):
        _make_trainer(tmp_path, **overrides)
