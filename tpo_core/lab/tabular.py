r"""The paper's multi-context tabular bandit (arXiv 2604.06159 §3.2 and App. B), exact and sampled.

``C`` independent contexts, each an ``A``-armed bandit with one correct arm, and a table of logits
``z [C, A]`` as the policy: :math:`\pi_c = \mathrm{softmax}(z_c)`. Arm 0 is the correct arm of every
context (no loss of generality: the arms are exchangeable), and :math:`p_c = \pi_c(0)`.

**Exact population update.** With reward :math:`r = 1\{a = 0\}` and baseline :math:`b = 0`, every
method's expected update in logit space points the same way inside a context and differs only by a
scalar that depends on :math:`p`:

.. math:: g_c = \beta(p_c)\,(e_0 - \pi_c),

.. math:: \beta_{CE} = 1,\quad
          \beta_{TPO} = \frac{p(\lambda - 1)}{1 - p + \lambda p},\ \lambda = e^{A/(\eta\sqrt{A-1})},\quad
          \beta_{GRPO} = \sqrt{\frac{p}{1-p}},\quad
          \beta_{DG} = \frac{p}{1 + p^{1/\eta}}

(CE is the supervised oracle that knows the correct arm; TPO's group is all ``A`` arms with one-hot
scores; GRPO's advantage uses the population std; DG's gate is
:math:`\mathrm{sigmoid}(A\cdot(-\log\pi(a))/\eta)`, which is :math:`p/(1+p)` at :math:`\eta = 1`.)

**Global-norm-normalised step.** The paper's tabular runs take one step of fixed length ``alpha`` for
all contexts together,

.. math:: z \leftarrow z + \alpha\, g / \lVert g \rVert_F ,

one length budget shared by every parameter of the table. Because the length is fixed and shared,
:math:`\beta(p_c)` decides which share of it context ``c`` receives. This is not what Adam or Muon do:
Adam normalises each coordinate by its own running second moment, Muon orthogonalises each matrix.

**Per-parameter Adam.** ``optimizer="adam"`` instead feeds the same exact update to Adam
(:func:`adam_step`, learning rate ``alpha``): every logit gets its own normalisation, so no budget is
shared between contexts, and a context's step depends on how its gradient compares with that
coordinate's remembered past gradients.

**Sampled update.** Each context draws ``k`` arms from its policy; the update is minus the gradient of
the method's own loss from :mod:`tpo_core.losses` at the rollout snapshot (TPO: ``tpo_loss`` over the
``k`` sampled arms; GRPO: ``grpo_loss``, whose first-epoch gradient is the group-standardised policy
gradient). All-equal groups (no arm correct, or all correct) contribute nothing.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from tpo_core import checks
from tpo_core import losses as L

METHODS = ("ce", "tpo", "grpo", "dg")  # exact population updates
SAMPLED_METHODS = ("tpo", "grpo")  # updates from k sampled arms per context


def _check_method(method, allowed=METHODS) -> None:
    if method not in allowed:
        raise ValueError(f"method must be one of {allowed}, got {method!r}")


_check_int = checks.integer  # the configs' rules (tpo_core.checks)
_check_positive = checks.positive_if_number


def tpo_lambda(n_arms: int, eta: float = 1.0):
    r"""TPO's odds multiplier on the correct arm: :math:`\lambda = e^{(u_0 - u_j)/\eta} = e^{A/(\eta\sqrt{A-1})}`
    (the one-hot scores standardise to :math:`u_0 = \sqrt{A-1}`, :math:`u_j = -1/\sqrt{A-1}`)."""
    _check_int("n_arms", n_arms, 2)
    _check_positive("eta", eta)
    return jnp.exp(n_arms / (eta * jnp.sqrt(n_arms - 1.0)))


def beta(method: str, p, n_arms: int = 10, eta: float = 1.0):
    r"""The coefficient :math:`\beta(p)` of the exact update :math:`g = \beta(p)(e_y - \pi)` (see the module
    docstring for the four closed forms). ``p`` is the probability of the correct arm, any shape."""
    _check_method(method)
    _check_int("n_arms", n_arms, 2)
    _check_positive("eta", eta)
    p = jnp.asarray(p, jnp.float32)
    if method == "ce":
        return jnp.ones_like(p)
    if method == "tpo":
        lam = tpo_lambda(n_arms, eta)
        return p * (lam - 1.0) / (1.0 - p + lam * p)
    if method == "grpo":
        return jnp.sqrt(p / (1.0 - p))
    return p / (1.0 + p ** (1.0 / eta))


def initial_logits(p0, n_arms: int = 10):
    r"""A table ``[C, A]`` whose context ``c`` gives the correct arm probability ``p0[c]`` and spreads the rest
    evenly: :math:`z_{c,0} = \log\frac{p_0 (A-1)}{1-p_0}`, :math:`z_{c,j} = 0`."""
    _check_int("n_arms", n_arms, 2)
    p0 = jnp.atleast_1d(jnp.asarray(p0, jnp.float32))
    if p0.ndim != 1:
        raise ValueError(f"p0 must be a 1-D array of probabilities, got shape {p0.shape}")
    try:
        inside = bool(jnp.all((p0 > 0) & (p0 < 1)))
    except jax.errors.ConcretizationTypeError:  # traced (inside jit/vmap): not checkable here
        inside = True
    if not inside:
        raise ValueError("p0 must lie strictly between 0 and 1")
    z = jnp.zeros((p0.shape[0], n_arms), jnp.float32)
    return z.at[:, 0].set(jnp.log(p0 * (n_arms - 1) / (1.0 - p0)))


def correct_prob(logits):
    """p = π(correct arm) of every context: logits [C, A] -> [C]."""
    return jax.nn.softmax(logits, -1)[..., 0]


def exact_update(logits, method: str, eta: float = 1.0):
    r"""The exact population update :math:`g_c = \beta(p_c)(e_0 - \pi_c)`: logits [C, A] -> [C, A]."""
    pi = jax.nn.softmax(logits, -1)
    e0 = jax.nn.one_hot(0, logits.shape[-1])
    return beta(method, pi[..., 0], logits.shape[-1], eta)[..., None] * (e0 - pi)


def normalised_step(logits, g, alpha: float):
    r""":math:`z + \alpha\, g/\lVert g\rVert_F` (the Frobenius norm over the whole table); a zero ``g`` leaves
    ``z`` unchanged."""
    _check_positive("alpha", alpha)
    norm = jnp.sqrt((g**2).sum())
    return logits + alpha * g / jnp.maximum(norm, 1e-30)


def step_shares(logits, method: str, eta: float = 1.0):
    r"""Which share of a normalised step each context receives: :math:`\lVert g_c\rVert^2 / \lVert g\rVert_F^2`
    ([C], sums to 1)."""
    g = exact_update(logits, method, eta)
    per = (g**2).sum(-1)
    return per / per.sum()


def ce_misalignment(logits, method: str, eta: float = 1.0):
    r"""How far a method's exact update points from the CE oracle's, over the whole table:
    :math:`1 - \cos(g, g_{CE})` with both flattened over [C, A] (0 when the shares match CE's)."""
    g = exact_update(logits, method, eta).ravel()
    g_ce = exact_update(logits, "ce").ravel()
    cos = (g @ g_ce) / jnp.maximum(jnp.linalg.norm(g) * jnp.linalg.norm(g_ce), 1e-30)
    return 1.0 - cos


OPTIMIZERS = ("normalised", "adam")  # how an exact update becomes a step of the table


def adam_step(logits, g, state, lr: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    r"""One per-parameter Adam step along the update ``g`` (an ascent direction: minus a gradient).

    ``state = (m, v, t)`` (first and second moments, shaped like ``logits``, and the step count ``t``
    already taken); returns ``(logits + lr·m̂/(√v̂ + eps), new_state)`` with the bias-corrected
    :math:`\hat m = m/(1-\beta_1^{t})`, :math:`\hat v = v/(1-\beta_2^{t})`. At the first step this is
    ``lr·sign(g)`` elementwise (for ``|g| ≫ eps``): Adam ignores the gradient's scale only there."""
    m, v, t = state
    t = t + 1
    m = b1 * m + (1.0 - b1) * g
    v = b2 * v + (1.0 - b2) * g**2
    m_hat = m / (1.0 - b1**t)
    v_hat = v / (1.0 - b2**t)
    return logits + lr * m_hat / (jnp.sqrt(v_hat) + eps), (m, v, t)


def adam_init(logits):
    """Adam's state for a table: zero moments, zero steps taken."""
    return jnp.zeros_like(logits), jnp.zeros_like(logits), jnp.zeros((), jnp.float32)


@functools.partial(jax.jit, static_argnames=("method", "steps", "optimizer"))
def _run_exact(logits, method, alpha, steps, eta, optimizer, b1, b2, eps):
    def step(carry, _):
        z, state = carry
        g = exact_update(z, method, eta)
        if optimizer == "adam":
            new, state = adam_step(z, g, state, alpha, b1, b2, eps)
        else:
            new = normalised_step(z, g, alpha)
        out = dict(
            p=correct_prob(z), grad_norm=jnp.linalg.norm(g, axis=-1), step_norm=jnp.linalg.norm(new - z, axis=-1)
        )
        return (new, state), out

    (z, _), out = jax.lax.scan(step, (logits, adam_init(logits)), None, length=steps)
    out["p"] = jnp.concatenate([out["p"], correct_prob(z)[None]], 0)
    return out


def trace_exact(
    logits,
    method: str,
    alpha: float = 0.1,
    steps: int = 1000,
    eta: float = 1.0,
    optimizer: str = "normalised",
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
) -> dict:
    """``steps`` exact updates from ``logits`` [C, A], each turned into a step by ``optimizer``:
    ``"normalised"`` (:func:`normalised_step`, length ``alpha``) or ``"adam"`` (:func:`adam_step`, learning
    rate ``alpha``, moments ``b1``, ``b2``). Returns {"p": [steps + 1, C] p before each step and after the last
    (row 0 is the initial table), "grad_norm": [steps, C] ‖g_c‖ of each step's exact update,
    "step_norm": [steps, C] ‖Δz_c‖ of each step}."""
    _check_method(method)
    _check_int("steps", steps, 1)
    _check_positive("alpha", alpha)
    _check_positive("eta", eta)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise ValueError(f"b1 and b2 must lie in [0, 1), got b1={b1!r}, b2={b2!r}")
    _check_positive("eps", eps)
    out = _run_exact(jnp.asarray(logits, jnp.float32), method, alpha, steps, eta, optimizer, b1, b2, eps)
    return dict(out)


def run_exact(logits, method: str, *args, **kwargs):
    """``steps`` exact updates from ``logits`` [C, A] (normalised steps of length ``alpha`` by default, or
    Adam with learning rate ``alpha``; the options and their checks are :func:`trace_exact`'s); returns p
    before each step and after the last, [steps + 1, C] (row 0 is the initial table)."""
    return trace_exact(logits, method, *args, **kwargs)["p"]


def steps_to(p_history, threshold: float = 0.99):
    """Steps each context needs to reach p >= ``threshold``: the first row of ``p_history`` [T + 1, C] at or
    above it, ``inf`` where no row is."""
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must lie strictly between 0 and 1, got {threshold!r}")
    hit = jnp.asarray(p_history) >= threshold
    first = jnp.argmax(hit, 0).astype(jnp.float32)
    return jnp.where(hit.any(0), first, jnp.inf)


def _arms_from_uniform(u, logits):
    """Inverse-CDF sampling: u [C, k] uniform on [0, 1) -> arms [C, k] drawn from softmax(logits [C, A])."""
    cdf = jnp.cumsum(jax.nn.softmax(logits, -1), -1)  # [C, A]
    return jnp.minimum((u[..., None] >= cdf[:, None, :]).sum(-1), logits.shape[-1] - 1)


def _update_from_arms(arms, logits, method, eta):
    scores = (arms == 0).astype(jnp.float32)  # [C, k]
    picked = jax.nn.one_hot(arms, logits.shape[-1])  # [C, k, A]

    def group_logp(z):  # log π_c(a_i) of the sampled arms (a one-hot contraction: cheap to differentiate)
        return jnp.einsum("cka,ca->ck", picked, jax.nn.log_softmax(z, -1))  # [C, k]

    logp_old = jax.lax.stop_gradient(group_logp(logits))
    if method == "tpo":
        loss = lambda z: L.tpo_loss(group_logp(z), logp_old, scores, eta)  # noqa: E731
    else:
        loss = lambda z: L.grpo_loss(group_logp(z), logp_old, scores)  # noqa: E731
    return -jax.grad(loss)(logits)


def sample_arms(key, logits, k: int):
    """``k`` arms per context drawn from softmax(logits [C, A]), with replacement: [C, k] int."""
    _check_int("k", k, 2)
    return _arms_from_uniform(jax.random.uniform(key, (logits.shape[0], k)), logits)


def sampled_update(key, logits, method: str, k: int, eta: float = 1.0):
    """Minus the gradient, at the rollout snapshot, of the method's loss over ``k`` arms sampled per context
    (with replacement, :func:`sample_arms`) with scores 1{arm = 0}: logits [C, A] -> [C, A].

    TPO: :func:`tpo_core.losses.tpo_loss` (the target over the k sampled arms, anchored on their old
    log-probs); GRPO: :func:`tpo_core.losses.grpo_loss` (ratio 1 at the snapshot, so minus its gradient is
    the group-standardised policy gradient; its KL term has zero gradient there)."""
    _check_method(method, SAMPLED_METHODS)
    return _update_from_arms(sample_arms(key, logits, k), logits, method, eta)


@functools.partial(jax.jit, static_argnames=("methods", "steps", "k"))
def _run_sampled(keys, logits, methods, alpha, steps, k, eta):
    def one_seed(key):
        # All draws up front, from an RBG stream seeded by ``key`` (XLA compiles threefry over a large shape
        # slowly, its RngBitGenerator quickly); every method of the run sees the same draws.
        stream = jax.random.wrap_key_data(jax.random.bits(key, (4,), jnp.uint32), impl="rbg")
        uniforms = jax.random.uniform(stream, (steps, logits.shape[0], k))  # [steps, C, k]

        def step(tables, u):
            new = tuple(
                normalised_step(z, _update_from_arms(_arms_from_uniform(u, z), z, m, eta), alpha)
                for z, m in zip(tables, methods)
            )
            return new, tuple(correct_prob(z) for z in tables)

        tables, p = jax.lax.scan(step, (logits,) * len(methods), uniforms)
        return tuple(jnp.concatenate([pm, correct_prob(z)[None]], 0) for pm, z in zip(p, tables))

    return jax.vmap(one_seed)(keys)


def run_sampled(
    keys, logits, methods=SAMPLED_METHODS, k: int = 8, alpha: float = 0.1, steps: int = 1000, eta: float = 1.0
) -> dict:
    """Like :func:`run_exact`, with the update of :func:`sampled_update` from ``k`` fresh arms per context at
    every step, for every seed in ``keys`` [S] (vmapped) and every method in ``methods`` (one compiled
    program; all methods see the same uniform draws of a seed, turned into arms by each one's own policy). Returns {method: p [S, steps + 1, C]}."""
    methods = (methods,) if isinstance(methods, str) else tuple(methods)
    if not methods:
        raise ValueError("methods must name at least one method")
    for m in methods:
        _check_method(m, SAMPLED_METHODS)
    _check_int("k", k, 2)
    _check_int("steps", steps, 1)
    _check_positive("alpha", alpha)
    _check_positive("eta", eta)
    keys = jnp.asarray(keys)
    if keys.ndim != 1:
        raise ValueError(f"keys must be a 1-D array of PRNG keys (one per seed), got shape {keys.shape}")
    out = _run_sampled(keys, jnp.asarray(logits, jnp.float32), methods, alpha, steps, k, eta)
    return dict(zip(methods, out))
