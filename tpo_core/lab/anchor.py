"""Where TPO's gradient comes from, epoch by epoch: the all-fail groups (the "anchor") against the rest.

An all-fail group (every score 0) has u = 0, hence q = p_old: its logit gradient p − p_old is zero on the
first epoch of an episode and, once the updates have moved the policy, pulls that group's softmax back
toward p_old. The group softmax is invariant to a common shift of the group's K log-probs, so this pull
constrains only their *relative* values: lowering every failure's log-probability together costs it
nothing (unlike GRPO's k3 term, which pulls each absolute log-probability back to its rollout value).

:func:`gradient_split` trains TPO exactly as :func:`tpo_core.train.make_token_program` does (the engine's own
``init_one``, ``rollout`` and optimizer; the same loss, written per group) and records, on every epoch of every
episode, the norm of the batch gradient ∇L and of its three parts (the terms of the all-fail, the all-success and
the informative groups, which sum to ∇L), and the all-fail part's projection share ⟨∇L_fail, ∇L⟩ / ‖∇L‖²
(the three projection shares sum to 1).
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from tpo_core import losses as L
from tpo_core import runtime
from tpo_core.config import TokenConfig
from tpo_core.models import Transformer
from tpo_core.train import make_token_program, token_parts


def gradient_split(cfg: TokenConfig):
    """A function ``run(seeds, episodes) -> metrics`` (numpy, each [seeds, episodes] or [seeds, episodes, E]):
    ``error``, ``zero_var_frac``, ``fail_frac`` (share of all-fail groups), and per epoch ``grad_norm``,
    ``fail_norm``, ``success_norm``, ``informative_norm``, ``fail_proj`` (⟨∇L_fail, ∇L⟩ / ‖∇L‖²) and
    ``fail_informative_cos`` (the cosine between the all-fail and the informative parts; 0 where either is 0). The run is the engine's TPO run of
    ``cfg`` (same seeds, prompts, samples and updates up to float rounding)."""
    if cfg.method != "tpo" or cfg.optimizer != "muon" or cfg.old_logp != "sampling":
        raise ValueError(
            "gradient_split follows the engine's default TPO run (method 'tpo', optimizer 'muon', "
            f"old_logp 'sampling'); got {cfg.method!r}, {cfg.optimizer!r}, {cfg.old_logp!r}"
        )
    program = make_token_program(cfg)
    parts = token_parts(cfg)
    rollout, tx = parts["rollout"], parts["tx"]
    graphdef = nnx.graphdef(
        nnx.eval_shape(lambda: Transformer(cfg.V, cfg.H, cfg.d_model, cfg.heads, cfg.layers, cfg.ffn, rngs=nnx.Rngs(0)))
    )
    n_groups = cfg.B

    def group_logp(model_params, batch):  # ℓ(θ) [B, K], teacher-forced
        policy = nnx.merge(graphdef, nnx.State(model_params))
        logp_full = policy.answer_logprobs(batch["prompts"], batch["answers"])  # [B, K, H, V]
        return jnp.take_along_axis(logp_full, batch["answers"][..., None], -1)[..., 0].sum(-1)

    def split(model_params, batch, knobs):
        """∇L (the batch's TPO loss, mean over groups) and its parts {fail, success, informative} at these
        parameters; the parts are the gradients of each kind of group's terms and sum to ∇L."""
        s = batch["scores"]
        q = L.tpo_target(batch["logp_old"], s, knobs["eta"], std_floor=knobs["std_floor"])  # frozen
        flat = L.zero_variance(s)
        fail = (s == 0).all(-1)  # [B] all-fail groups
        logp, pull = jax.vjp(lambda m: group_logp(m, batch), model_params)
        dl = (jax.nn.softmax(logp, -1) - q) / n_groups  # ∂L/∂ℓ of L = mean over groups of CE(q, p)
        g = pull(dl)[0]
        g_fail = pull(dl * fail[:, None].astype(dl.dtype))[0]
        g_success = pull(dl * (flat & ~fail)[:, None].astype(dl.dtype))[0]
        g_informative = jax.tree.map(lambda a, b, c: a - b - c, g, g_fail, g_success)
        return g, dict(fail=g_fail, success=g_success, informative=g_informative)

    def episode(state, e):
        knobs = state["knobs"]
        batch, error = rollout(state["params"], state["key"], e, knobs)
        flat, fail = L.zero_variance(batch["scores"]), (batch["scores"] == 0).all(-1)

        def epoch(carry, _):
            params, opt = carry
            g, g_parts = split(params["model"], batch, knobs)
            updates, opt = tx.update({**params, "model": g}, opt, params)
            norm = optax.tree.norm(g)
            out = dict(
                grad_norm=norm,
                **{f"{k}_norm": optax.tree.norm(v) for k, v in g_parts.items()},
                fail_proj=optax.tree.vdot(g_parts["fail"], g) / jnp.maximum(norm**2, 1e-30),
                fail_informative_cos=optax.tree.vdot(g_parts["fail"], g_parts["informative"])
                / jnp.maximum(optax.tree.norm(g_parts["fail"]) * optax.tree.norm(g_parts["informative"]), 1e-30),
            )
            return (optax.apply_updates(params, updates), opt), out

        (params, opt), per_epoch = jax.lax.scan(epoch, (state["params"], state["opt"]), None, length=cfg.n_epochs)
        metrics = dict(error=error, zero_var_frac=flat.mean(), fail_frac=fail.mean(), **per_epoch)
        return dict(state, params=params, opt=opt), metrics

    def chunk(carry, start, n):
        return jax.vmap(lambda st: jax.lax.scan(episode, st, start + jnp.arange(n)))(carry)

    program_of = jax.jit(chunk, static_argnums=2, compiler_options=runtime.chunk_compiler_options())

    def run(seeds: Sequence[int], episodes: int) -> dict:
        carry = program.init(list(seeds))
        _, metrics = program_of(carry, 0, episodes)
        return jax.tree.map(np.asarray, metrics)

    run.split = split  # (model params, batch, knobs) -> (∇L, its parts), for tests
    run.program = program
    return run
