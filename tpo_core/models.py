"""Flax NNX models: the bandit MLP and the pre-norm causal Transformer of arXiv 2604.06159 (§3.3 and §3.4–3.6; the reference repository's linen model).

The Transformer is written for the token tasks' structure: a prompt of H tokens shared by K
answers. The prompt runs **once per prompt**; each candidate answer only feeds its own H-1 answer
tokens, which attend to the prompt's cached keys/values (broadcast over K) and causally to each
other — both when sampling (a KV cache over the answer) and in the teacher-forced training pass.
The input buffer is ``[prompt, answer]`` (length 2H, no BOS); position H-1+t predicts answer token t.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


def _rows(f, x):
    """Apply ``f`` (a map of the last axis) to x [..., d] as to one [N, d] matrix, then restore the leading axes.

    The same numbers as applying it to x directly; on the CPU it keeps each weight gradient one plain [d, N] x
    [N, f] product: with the leading axes kept (B, K, T), XLA contracts over three axes at once and first copies
    the [N, f] operand into transposed layout (``python -m benchmarks.bench_train --ops`` counts layout copies).
    """
    y = f(x.reshape(-1, x.shape[-1]))
    return y.reshape(x.shape[:-1] + y.shape[1:])


def _transposed(x):
    """x with its last two axes swapped, materialized: the barrier keeps XLA from folding the transpose back
    into the consuming product as a transposed operand."""
    return jax.lax.optimization_barrier(jnp.swapaxes(x, -1, -2))


@jax.custom_vjp
def _mm_nt(a, b):
    """a [..., M, E] x b [..., N, E] -> [..., M, N] (scores q·kᵀ), batched over the leading axes.

    Forward and gradients are the plain products; the custom rule only chooses operand layouts. The gradient
    of b is (gᵀ)·a with gᵀ materialized: contracting over a non-minor axis of both operands, XLA's CPU backend
    runs these batched products over a few rows (the answer's tokens) as its slowest kind.
    """
    return jnp.einsum("...me,...ne->...mn", a, b)


def _mm_nt_fwd(a, b):
    return _mm_nt(a, b), (a, b)


def _mm_nt_bwd(res, g):
    a, b = res
    return g @ b, _transposed(g) @ a


_mm_nt.defvjp(_mm_nt_fwd, _mm_nt_bwd)


@jax.custom_vjp
def _mm_nn(a, b):
    """a [..., M, N] x b [..., N, E] -> [..., M, E] (weights · values); gradients as in :func:`_mm_nt`."""
    return a @ b


def _mm_nn_fwd(a, b):
    return _mm_nn(a, b), (a, b)


def _mm_nn_bwd(res, g):
    a, b = res
    return jnp.einsum("...me,...ne->...mn", g, b), _transposed(a) @ g


_mm_nn.defvjp(_mm_nn_fwd, _mm_nn_bwd)


class MLP(nnx.Module):
    """784-50-50-10 ReLU MLP of the MNIST bandit (sizes configurable)."""

    def __init__(self, in_dim: int = 784, hidden=(50, 50), out_dim: int = 10, *, rngs: nnx.Rngs):
        dims = (in_dim, *hidden)
        self.hidden = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in zip(dims[:-1], dims[1:])])
        self.head = nnx.Linear(dims[-1], out_dim, rngs=rngs)

    def __call__(self, x):  # [N, in_dim] -> logits [N, out_dim]
        for layer in self.hidden:
            x = jax.nn.relu(layer(x))
        return self.head(x)


class Attention(nnx.Module):
    """Multi-head attention laid out as Flax linen's ``SelfAttention`` (the reference model's): 3-D
    kernels [d, h, hd] (stacked for q, k, v) and [h, hd, d], and separate 2-D q, k, v biases [h, hd].

    The optimizer routes by rank (Muon on 2-D arrays, AdamW on the rest), so, as in the reference, the
    kernels and the output bias go to AdamW and the three q/k/v biases to Muon.
    """

    def __init__(self, d_model: int, heads: int, *, rngs: nnx.Rngs):
        hd = d_model // heads
        init = nnx.initializers.lecun_normal(in_axis=0, out_axis=(1, 2))
        out_init = nnx.initializers.lecun_normal(in_axis=(0, 1), out_axis=2)
        self.wqkv = nnx.Param(jnp.stack([init(rngs.params(), (d_model, heads, hd)) for _ in range(3)]))
        self.bq = nnx.Param(jnp.zeros((heads, hd)))
        self.bk = nnx.Param(jnp.zeros((heads, hd)))
        self.bv = nnx.Param(jnp.zeros((heads, hd)))
        self.wo = nnx.Param(out_init(rngs.params(), (heads, hd, d_model)))
        self.bo = nnx.Param(jnp.zeros((d_model,)))
        self.scale = hd**-0.5

    def qkv(self, x):  # [..., d] -> one (q, k, v) per head, each [..., hd]
        # Head by head, each a [rows, d] x [d, hd] product: attention then runs on contiguous [..., T, hd] arrays
        # with no transpose between the token-major projections and the head-batched products. The same numbers as
        # the reference's [..., h, hd] layout.
        w = self.wqkv[...]
        biases = [b[...] for b in (self.bq, self.bk, self.bv)]
        return [
            tuple(_rows(lambda r, i=i, j=j: r @ w[i, :, j], x) + biases[i][j] for i in range(3))
            for j in range(w.shape[2])
        ]

    def out(self, heads):  # one [..., hd] per head -> [..., d]
        wo = self.wo[...]
        return sum(_rows(lambda r, j=j: r @ wo[j], o) for j, o in enumerate(heads)) + self.bo[...]


def _causal_mask(n: int):
    return jnp.tril(jnp.ones((n, n), bool))


class Block(nnx.Module):
    def __init__(self, d_model: int, heads: int, ffn: int, *, rngs: nnx.Rngs):
        self.ln1 = nnx.LayerNorm(d_model, rngs=rngs)
        self.attn = Attention(d_model, heads, rngs=rngs)
        self.ln2 = nnx.LayerNorm(d_model, rngs=rngs)
        self.fc1 = nnx.Linear(d_model, ffn, rngs=rngs)
        self.fc2 = nnx.Linear(ffn, d_model, rngs=rngs)

    def mlp(self, x):
        return _rows(lambda r: self.fc2(jax.nn.gelu(self.fc1(r))), self.ln2(x))

    def prompt(self, x):
        """Causal self-attention over the prompt. x [B, P, d] -> (x', per head (k, v), each [B, P, hd])."""
        mask = _causal_mask(x.shape[1])
        outs, kvs = [], []
        for q, k, v in self.attn.qkv(self.ln1(x)):
            s = jnp.where(mask, jnp.einsum("bte,bse->bts", q, k) * self.attn.scale, -1e30)
            outs.append(jnp.einsum("bts,bse->bte", jax.nn.softmax(s, -1), v))
            kvs.append((k, v))
        x = x + self.attn.out(outs)
        return x + self.mlp(x), kvs

    def answer(self, x, prompt_kv, mask, cache=None, t=None):
        """Answer tokens attend to the whole prompt and to the answer keys allowed by ``mask``.

        x [B, K, T, d]; prompt_kv: per head (k, v), each [B, P, hd]; mask [T, S].
        Teacher forcing: ``cache=None`` and the answer keys are x's own (S = T).
        Sampling: ``cache`` (per head (k, v), each [B, K, S, hd]) receives x's keys/values at slot ``t``.
        Returns (x', per head the answer keys/values used).
        """
        outs, kvs = [], []
        for j, (q, k, v) in enumerate(self.attn.qkv(self.ln1(x))):
            if cache is not None:
                k = jax.lax.dynamic_update_slice_in_dim(cache[j][0], k, t, axis=2)
                v = jax.lax.dynamic_update_slice_in_dim(cache[j][1], v, t, axis=2)
            kp, vp = prompt_kv[j]
            b, kk, tt, e = q.shape
            sp = _mm_nt(q.reshape(b, kk * tt, e), kp).reshape(b, kk, tt, -1) * self.attn.scale
            sa = jnp.where(mask, _mm_nt(q, k) * self.attn.scale, -1e30)
            w = jax.nn.softmax(jnp.concatenate([sp, sa], -1), -1)
            wp, wa = w[..., : sp.shape[-1]], w[..., sp.shape[-1] :]
            outs.append(_mm_nn(wp.reshape(b, kk * tt, -1), vp).reshape(q.shape) + _mm_nn(wa, v))
            kvs.append((k, v))
        x = x + self.attn.out(outs)
        return x + self.mlp(x), kvs


class Transformer(nnx.Module):
    """Pre-norm causal Transformer: d 64, 2 heads, 2 layers, FFN 256 (GELU), learned positions.

    About 101.6k parameters at V = 2, H = 10.
    """

    def __init__(
        self,
        vocab: int,
        horizon: int,
        d_model: int = 64,
        heads: int = 2,
        layers: int = 2,
        ffn: int = 256,
        *,
        rngs: nnx.Rngs,
    ):
        if d_model % heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by heads ({heads})")
        self.vocab, self.horizon = vocab, horizon
        self.embed = nnx.Embed(vocab, d_model, rngs=rngs)
        self.pos = nnx.Param(0.02 * jax.random.normal(rngs.params(), (2 * horizon, d_model)))
        self.blocks = nnx.List([Block(d_model, heads, ffn, rngs=rngs) for _ in range(layers)])
        self.ln_f = nnx.LayerNorm(d_model, rngs=rngs)
        self.head = nnx.Linear(d_model, vocab, rngs=rngs)

    # -- prompt ------------------------------------------------------------------------------
    def encode_prompt(self, prompts):
        """prompts [B, H] -> (log-probs of answer token 0 [B, V], per layer and head the prompt's (k, v), each
        [B, H, hd])."""
        h = prompts.shape[1]
        x = self.embed(prompts) + self.pos[...][:h]
        kvs = []
        for block in self.blocks:
            # keys/values of a layer come from that layer's input
            x, kv = block.prompt(x)
            kvs.append(kv)
        return jax.nn.log_softmax(self.head(self.ln_f(x[:, -1])), -1), kvs

    def _answer_inputs(self, tokens, start):
        """tokens [B, K, T] placed at positions start.. -> embeddings [B, K, T, d]."""
        t = tokens.shape[-1]
        pos = jax.lax.dynamic_slice_in_dim(self.pos[...], start, t, 0)
        return self.embed(tokens) + pos

    # -- teacher-forced training pass --------------------------------------------------------
    def answer_logprobs(self, prompts, answers):
        """Log-probs of every answer position given the answers. prompts [B, H], answers [B, K, H]
        -> [B, K, H, V] (log-softmax over the vocabulary)."""
        h = self.horizon
        logp0, prompt_kv = self.encode_prompt(prompts)
        x = self._answer_inputs(answers[..., :-1], h)  # answer tokens 0..H-2 at positions H..2H-2
        mask = _causal_mask(h - 1)
        for block, kv in zip(self.blocks, prompt_kv):
            x, _ = block.answer(x, kv, mask)
        rest = jax.nn.log_softmax(_rows(self.head, self.ln_f(x)), -1)  # [B, K, H-1, V]
        first = jnp.broadcast_to(logp0[:, None, None, :], rest.shape[:2] + (1, rest.shape[-1]))
        return jnp.concatenate([first, rest], axis=2)

    # -- autoregressive sampling with a KV cache over the answer ------------------------------
    def sample(self, prompts, key, k: int):
        """Sample K answers per prompt at temperature 1.

        Returns answers [B, K, H] (int32) and the behaviour log-probs over the vocabulary at
        every answer position [B, K, H, V].
        """
        b, h = prompts.shape
        logp0, prompt_kv = self.encode_prompt(prompts)
        keys = jax.random.split(key, h)
        logp0 = jnp.broadcast_to(logp0[:, None, :], (b, k, self.vocab))
        tok0 = jax.random.categorical(keys[0], logp0)
        hd = prompt_kv[0][0][0].shape[-1]
        cache0 = [
            [(jnp.zeros((b, k, h - 1, hd)), jnp.zeros((b, k, h - 1, hd))) for _ in layer_kv] for layer_kv in prompt_kv
        ]

        def step(carry, t):
            tok, cache = carry
            x = self._answer_inputs(tok[..., None], h + t)  # [B, K, 1, d]
            mask = (jnp.arange(h - 1) <= t)[None, :]
            new_cache = []
            for block, kv, layer_cache in zip(self.blocks, prompt_kv, cache):
                x, layer_cache = block.answer(x, kv, mask, layer_cache, t)
                new_cache.append(layer_cache)
            logp = jax.nn.log_softmax(self.head(self.ln_f(x[:, :, 0])), -1)  # [B, K, V]
            nxt = jax.random.categorical(keys[t + 1], logp)
            return (nxt, new_cache), (nxt, logp)

        _, (toks, logps) = jax.lax.scan(step, (tok0, cache0), jnp.arange(h - 1))
        answers = jnp.concatenate([tok0[..., None], jnp.moveaxis(toks, 0, -1)], -1)
        logps = jnp.concatenate([logp0[:, :, None], jnp.moveaxis(logps, 0, 2)], 2)
        return answers.astype(jnp.int32), logps

    def full_sequence_logprobs(self, prompts, answers):
        """Reference path without any sharing: run the whole [prompt, answer] buffer per candidate.
        Used by tests to check :meth:`answer_logprobs`. -> [B, K, H, V]."""
        b, k, h = answers.shape
        buf = jnp.concatenate([jnp.broadcast_to(prompts[:, None], (b, k, h)), answers], -1)
        buf = buf.reshape(b * k, 2 * h)[:, :-1]
        x = self.embed(buf) + self.pos[...][: 2 * h - 1]
        for block in self.blocks:
            x, _ = block.prompt(x)
        logp = jax.nn.log_softmax(self.head(self.ln_f(x)), -1)[:, h - 1 :]
        return logp.reshape(b, k, h, -1)


def count_params(state) -> int:
    return sum(int(x.size) for x in jax.tree.leaves(state))
