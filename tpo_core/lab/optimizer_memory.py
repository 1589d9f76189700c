"""How an optimizer's step responds when the gradient suddenly changes scale in a running job.

Muon orthogonalises its momentum matrix (Newton–Schulz), which discards the matrix's overall scale: its step
length does not depend on the gradient's size. Adam divides the first moment m by the square root of the
second moment v, an exponential average that remembers about 1/(1 − β₂) steps. On its first update, or for a
constant factor on every gradient, the scale cancels; in a running job it does not: a gradient small next to
the recent history meets the history's large v, so the step is proportionally small until v has decayed.

:func:`rescale_run` measures it: ``warm`` steps of an optimizer on ordinary gradients, then ``after`` steps on
the same gradients times ``scale``, recording each step's update norm per parameter group.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from tpo_core.train import optimizer_route


def rescale_run(
    tx: optax.GradientTransformation, params, grads, *, warm: int, after: int, scale: float, labels=None
) -> dict:
    """Update norms of ``tx`` over ``warm`` steps on ``grads``, then ``after`` steps on ``scale × grads``.

    ``grads``: a gradient pytree shaped like ``params`` (the same gradient every step) or a function
    ``step -> pytree`` (step 0, 1, ...; scaled from step ``warm`` on). The parameters are held fixed, so only the
    optimizer's state evolves. ``labels``: a pytree of group names shaped like ``params`` (default
    :func:`tpo_core.train.optimizer_route`, the engine's routing). Returns ``{group: norms [warm + after]}`` (numpy), the norm of the update restricted
    to each group's arrays at every step, and ``"all"`` for the whole update."""
    if warm < 1 or after < 1:
        raise ValueError(f"warm and after must be >= 1, got {warm} and {after}")
    labels = optimizer_route(params) if labels is None else labels
    grad_of = grads if callable(grads) else (lambda step: grads)
    names = sorted(set(jax.tree.leaves(labels)))

    def norms(updates):
        out = {"all": optax.tree.norm(updates)}
        for name in names:
            masked = jax.tree.map(lambda u, lab, name=name: u if lab == name else jnp.zeros_like(u), updates, labels)
            out[name] = optax.tree.norm(masked)
        return out

    @jax.jit
    def run(params):
        def step(opt, i):
            factor = jnp.where(i < warm, 1.0, scale).astype(jnp.float32)
            g = jax.tree.map(lambda x: factor * x, grad_of(i))
            updates, opt = tx.update(g, opt, params)
            return opt, norms(updates)

        return jax.lax.scan(step, tx.init(params), jnp.arange(warm + after))[1]

    return jax.tree.map(np.asarray, run(params))
