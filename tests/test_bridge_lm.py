"""The bridge's identities on a real (tiny, random, local) causal LM: exact group loss vs the Route-A surrogate.

A 2-layer Llama (vocab 64, width 32) built from a config, no hub; completions sampled from it once and
frozen. At θ = θ_old, ∇θ of TPO's group cross-entropy equals ∇θ of -mean_i w_i ℓ_i with
w = K (q - p_old) and ℓ the token-sum log-prob, under row permutations, micro-batch splits and a
simulated two-rank data-parallel average. The expected gradient is also built from the JAX engine's q.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the bridge needs PyTorch: pip install 'tpo_core[torch]'")
transformers = pytest.importorskip("transformers", reason="the LM tests need transformers: pip install 'tpo_core[trl]'")

import jax.numpy as jnp  # noqa: E402

from tpo_core import losses as L  # noqa: E402
from tpo_core.bridge import torch_ops as T  # noqa: E402
from tpo_core.bridge import verl as V  # noqa: E402
from tpo_core.lab.llm.common import tiny_llama  # noqa: E402

G, K, PROMPT, COMPLETION = 3, 4, 3, 5
ETA = 0.8


@pytest.fixture(scope="module")
def lm():
    model = tiny_llama(0, max_position_embeddings=32).double().eval()
    prompts = torch.randint(3, 64, (G, PROMPT))
    with torch.no_grad():  # K samples per prompt, frozen
        seqs = model.generate(
            prompts.repeat_interleave(K, 0),
            attention_mask=torch.ones(G * K, PROMPT, dtype=torch.long),
            do_sample=True,
            max_new_tokens=COMPLETION,
            min_new_tokens=COMPLETION,
            pad_token_id=0,
            top_k=0,
            top_p=1.0,
        )
    rng = np.random.default_rng(0)
    lengths = torch.tensor(rng.integers(2, COMPLETION + 1, G * K))  # ragged completions: right padding
    mask = (torch.arange(COMPLETION)[None, :] < lengths[:, None]).double()
    scores = torch.tensor(rng.integers(0, 3, G * K), dtype=torch.float64)
    scores[:K] = 1.0  # one all-equal group
    uids = np.repeat(np.arange(G), K)
    return model, seqs, mask, scores, uids


def _token_logp(model, seqs):
    logits = model(seqs).logits[:, PROMPT - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, seqs[:, PROMPT:, None]).squeeze(-1)  # [N, T]


def _grads(model, loss_fn, chunks):
    """Σ over chunks of ∇θ loss_fn(rows): gradient accumulation over micro-batches."""
    model.zero_grad()
    for rows in chunks:
        loss_fn(rows).backward()
    return torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()])


def _setup(lm):
    model, seqs, mask, scores, uids = lm
    with torch.no_grad():
        seq_old = T.sequence_logp(_token_logp(model, seqs), mask)
    w = T.tpo_sequence_weights(seq_old, scores, uids, ETA)
    return model, seqs, mask, scores, uids, seq_old, w


def _exact(model, seqs, mask, scores, seq_old, n_groups_total):
    def loss(rows):  # rows: whole groups, contiguous
        seq = T.sequence_logp(_token_logp(model, seqs[rows]), mask[rows]).view(-1, K)
        return (
            T.tpo_loss(seq, seq_old[rows].view(-1, K), scores[rows].view(-1, K), ETA, reduction="sum") / n_groups_total
        )

    return loss


def _surrogate(model, seqs, mask, w, n_rows_total):
    def loss(rows):  # rows: any subset, any order
        seq = T.sequence_logp(_token_logp(model, seqs[rows]), mask[rows])
        return -(w[rows] * seq).sum() / n_rows_total

    return loss


def test_exact_gradient_equals_route_a_surrogate_and_the_engine_at_theta_old(lm):
    model, seqs, mask, scores, uids, seq_old, w = _setup(lm)
    rows = torch.arange(G * K)
    exact = _grads(model, _exact(model, seqs, mask, scores, seq_old, G), [rows])
    surrogate = _grads(model, _surrogate(model, seqs, mask, w, G * K), [rows])
    torch.testing.assert_close(surrogate, exact, rtol=1e-9, atol=1e-12)
    # independent: Σ_i (p_old - q)_i / G ∇ℓ_i with q from the JAX engine (float32 target)
    q = np.asarray(
        L.tpo_target(jnp.asarray(seq_old.view(G, K).numpy()), jnp.asarray(scores.view(G, K).numpy()), ETA), np.float64
    ).reshape(-1)
    p_old = torch.softmax(seq_old.view(G, K), -1).reshape(-1)
    coef = (p_old - torch.tensor(q)) / G
    engine = _grads(model, lambda r: (coef[r] * T.sequence_logp(_token_logp(model, seqs[r]), mask[r])).sum(), [rows])
    torch.testing.assert_close(exact, engine, rtol=1e-5, atol=1e-7)
    assert exact.abs().max() > 1e-4  # a real, non-zero gradient


def test_invariant_to_row_permutation_micro_batches_and_two_ranks(lm):
    model, seqs, mask, scores, uids, seq_old, w = _setup(lm)
    n = G * K
    reference = _grads(model, _surrogate(model, seqs, mask, w, n), [torch.arange(n)])
    perm = torch.tensor(np.random.default_rng(1).permutation(n))
    # Route A: rows permuted and cut into uneven micro-batches that split groups
    split = _grads(model, _surrogate(model, seqs, mask, w, n), [perm[:5], perm[5:7], perm[7:]])
    torch.testing.assert_close(split, reference, rtol=1e-9, atol=1e-12)
    # the weights follow their rows: recomputed from permuted rows they are the permuted weights
    w_perm = T.tpo_sequence_weights(seq_old[perm], scores[perm], uids[perm.numpy()], ETA)
    torch.testing.assert_close(w_perm, w[perm], rtol=1e-12, atol=1e-14)
    # two ranks, each accumulating its micro-batches with loss scaled by dp_size; DDP averages the ranks
    rank_rows = [perm[: n // 2], perm[n // 2 :]]
    per_rank = [
        _grads(model, lambda r: 2 * _surrogate(model, seqs, mask, w, n)(r), [rr[:3], rr[3:]]) for rr in rank_rows
    ]
    torch.testing.assert_close((per_rank[0] + per_rank[1]) / 2, reference, rtol=1e-9, atol=1e-12)
    # the exact loss, accumulated over micro-batches of whole groups in any group order
    exact = _grads(
        model, _exact(model, seqs, mask, scores, seq_old, G), [torch.arange(2 * K, 3 * K), torch.arange(0, 2 * K)]
    )
    torch.testing.assert_close(exact, reference, rtol=1e-9, atol=1e-12)


def test_identity_fails_away_from_theta_old(lm):
    """After one step the surrogate (frozen w) and the exact loss (current softmax) disagree: why Route B exists."""
    model, seqs, mask, scores, uids, seq_old, w = _setup(lm)
    rows = torch.arange(G * K)
    saved = [p.detach().clone() for p in model.parameters()]
    try:
        g = _grads(model, _exact(model, seqs, mask, scores, seq_old, G), [rows])
        with torch.no_grad():
            offset = 0
            for p in model.parameters():
                p -= 50.0 * g[offset : offset + p.numel()].view_as(p)
                offset += p.numel()
        exact = _grads(model, _exact(model, seqs, mask, scores, seq_old, G), [rows])
        surrogate = _grads(model, _surrogate(model, seqs, mask, w, G * K), [rows])
        assert (exact - surrogate).norm() > 1e-3 * exact.norm()
    finally:
        with torch.no_grad():
            for p, s in zip(model.parameters(), saved):
                p.copy_(s)


def test_route_b_loss_on_the_lm_and_its_guard(lm):
    model, seqs, mask, scores, uids, seq_old, w = _setup(lm)
    n = G * K
    token_rewards = torch.zeros_like(mask)
    lengths = mask.sum(-1).long()
    token_rewards[torch.arange(n), lengths - 1] = scores
    adv, _ = V.compute_tpo_group_advantage(token_rewards, mask, index=uids, config={"tpo_eta": ETA})
    with torch.no_grad():
        old_tok = _token_logp(model, seqs)

    class Cfg(dict):
        rollout_n = K
        global_batch_info = {"dp_size": 1, "global_batch_size": n}
        policy_loss = {"tpo_sequence_logp": "sum"}  # _exact below uses summed log-probs

    def route_b(rows):
        loss, _ = V.compute_policy_loss_tpo_group(
            old_tok[rows], _token_logp(model, seqs[rows]), adv[rows], mask[rows].bool(), config=Cfg()
        )
        return loss

    whole = torch.arange(n)
    b = _grads(model, route_b, [whole[: 2 * K], whole[2 * K :]])  # micro-batches of whole groups
    exact = _grads(model, _exact(model, seqs, mask, scores, seq_old, G), [whole])
    torch.testing.assert_close(b, exact, rtol=1e-5, atol=1e-7)  # the estimator's u is float32
    shuffled = torch.tensor(np.random.default_rng(2).permutation(n))
    with pytest.raises(ValueError, match="not whole groups"):
        route_b(shuffled)
