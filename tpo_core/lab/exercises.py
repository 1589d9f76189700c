"""Checkers for the book's exercises: they test *your* function on random inputs against ``tpo_core``.

Each ``check_*(fn)`` calls ``fn`` on a few dozen random inputs (several group sizes K, leading batch
axes, 0/1 and continuous scores, all-equal groups, several η) and compares what it returns with the
reference implementation in :mod:`tpo_core.losses` or :mod:`tpo_core.tasks`. It prints one line
starting with ``passed`` when everything agrees, and otherwise raises ``AssertionError`` saying which
input differed, by how much, and, when the output is what a common bug produces, which bug that is.
Inputs are ``jax.numpy`` float32 arrays (NumPy functions accept them too); only
:func:`check_tpo_loss_grad` needs ``fn`` to be written with ``jax.numpy``, because it differentiates
``fn`` with ``jax.grad``. ``show_hints=False`` leaves the names of known bugs out of the message (the
book's "silent bug" exercises use it, so that the checker shows *where* the function is wrong, not *why*).

Usage (the pattern of the book's starter cells)::

    from tpo_core.lab import exercises

    def my_tpo_target(logp_old, scores, eta):
        raise NotImplementedError          # your code here

    exercises.attempt(exercises.check_tpo_target, my_tpo_target)  # "not solved yet: ..." until it passes
    exercises.check_tpo_target(my_tpo_target)                     # raises AssertionError until it passes

Checkers and the chapters that use them: :func:`check_standardize` (ch. 1), :func:`check_tpo_target`
(ch. 2), :func:`check_tpo_loss_grad`, :func:`check_grpo_advantages`, :func:`check_k3` and
:func:`check_sequence_logprob` (ch. 3, and the silent bug of ch. 7), :func:`check_candidate_rewards`
(the silent bug of ch. 5), :func:`check_group_minibatches` (ch. 9) and :func:`check_sequence_weights`
(ch. 10). :func:`check_group_minibatches` checks index arrays, not numbers: its ``fn`` gets plain
Python integers and a NumPy random generator.
"""

from __future__ import annotations

from typing import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from tpo_core import checks, tasks
from tpo_core import losses as L

__all__ = [
    "attempt",
    "check_standardize",
    "check_tpo_target",
    "check_tpo_loss_grad",
    "check_grpo_advantages",
    "check_k3",
    "check_sequence_logprob",
    "check_candidate_rewards",
    "check_group_minibatches",
    "check_sequence_weights",
]

ATOL = 1e-4  # float32 on values of order 1 (u up to sqrt(K - 1), probabilities, log-probs)
RTOL = 1e-4


# --------------------------------------------------------------------------------------------
# running a checker
# --------------------------------------------------------------------------------------------
def attempt(checker: Callable, fn: Callable, **kwargs) -> bool:
    """Run ``checker(fn, **kwargs)``; print ``not solved yet: <why>`` instead of raising.

    Returns True when the check passed. Catches only ``AssertionError`` (a wrong answer) and
    ``NotImplementedError`` (a stub not filled in yet); any other error in ``fn`` propagates with its
    traceback, so a crash in your code is shown where it happens.
    """
    _check_callable("checker", checker)
    _check_callable("fn", fn)
    try:
        checker(fn, **kwargs)
    except NotImplementedError:
        print(f"not solved yet: {_name(fn)} raises NotImplementedError (fill in the stub, then run this cell again)")
        return False
    except AssertionError as e:
        print(f"not solved yet: {e}")
        return False
    return True


def _check_callable(name: str, value) -> None:
    if not callable(value):
        raise ValueError(f"{name} must be a function, got {value!r}")


def _check_trials(trials) -> None:
    checks.integer("trials", trials, 1)


def _name(fn) -> str:
    return getattr(fn, "__name__", repr(fn))


def _fmt(x) -> str:
    a = np.asarray(x)
    if a.size > 24:
        return f"array of shape {a.shape}"
    return np.array2string(a, precision=4, suppress_small=True, separator=", ").replace("\n", " ")


def _as_array(name: str, out, shape) -> np.ndarray:
    try:
        arr = np.asarray(out, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise AssertionError(f"{name} returned {type(out).__name__}, which is not an array of numbers ({e})") from None
    if arr.shape != tuple(shape):
        raise AssertionError(f"{name} returned shape {arr.shape}, expected {tuple(shape)}")
    return arr


_SHOW_HINTS = [True]  # set by each checker's ``show_hints``


def _compare(
    what: str, got, want, inputs: dict, hints: dict | None = None, atol: float = ATOL, rtol: float = RTOL
) -> None:
    """Raise AssertionError unless ``got`` equals ``want``; name a known bug when ``got`` matches it."""
    hints = hints if _SHOW_HINTS[0] else None
    want = np.asarray(want, dtype=np.float64)
    got = _as_array(what, got, want.shape)
    bad_nan = ~np.isfinite(got) & np.isfinite(want)
    if not bad_nan.any() and np.allclose(got, want, atol=atol, rtol=rtol):
        return
    lines = [f"{what} differs from tpo_core on this input:"]
    lines += [f"  {k} = {_fmt(v)}" for k, v in inputs.items()]
    lines += [f"  yours    = {_fmt(got)}", f"  expected = {_fmt(want)}"]
    if bad_nan.any():
        lines.append(f"  yours has NaN/inf at {int(bad_nan.sum())} position(s) where tpo_core is finite")
    else:
        lines.append(f"  largest difference {float(np.max(np.abs(got - want))):.3g}")
    if got.ndim >= 2 and got.size > 24:  # a big array: show the first group (last axis) that differs
        with np.errstate(invalid="ignore"):
            wrong = bad_nan | ~np.isclose(got, want, atol=atol, rtol=rtol)
        at = tuple(int(i) for i in np.argwhere(wrong)[0][:-1])
        lines.append(f"  first group that differs, index {list(at)}:")
        for k, v in inputs.items():
            v = np.asarray(v)
            if v.shape == got.shape:
                lines.append(f"    {k}{list(at)} = {_fmt(v[at])}")
            elif v.shape == got.shape[:-1] and len(at) >= 1:
                lines.append(f"    {k}{list(at[:-1])} = {_fmt(v[at[:-1]])}")
        lines += [f"    yours{list(at)}    = {_fmt(got[at])}", f"    expected{list(at)} = {_fmt(want[at])}"]
    for description, buggy in (hints or {}).items():
        try:
            with np.errstate(all="ignore"):
                b = np.asarray(buggy(), dtype=np.float64)
        except Exception:  # a hint that cannot be evaluated is simply not shown
            continue
        if b.shape == got.shape and np.allclose(got, b, atol=atol, rtol=rtol, equal_nan=True):
            lines.append(f"  hint: that is what {description} gives")
            break
    raise AssertionError("\n".join(lines))


def _passed(checker: str, fn, n: int, what: str) -> None:
    print(f"passed: {checker}({_name(fn)}) agrees with {what} on {n} random inputs")


# --------------------------------------------------------------------------------------------
# random inputs
# --------------------------------------------------------------------------------------------
SHAPES = ((6,), (4, 8), (2, 3, 5))  # few shapes: each new shape costs JAX a compile

# the references, compiled once per shape
_standardize = jax.jit(L.standardize)
_tpo_target = jax.jit(L.tpo_target)
_tpo_loss = jax.jit(L.tpo_loss)
_tpo_loss_grad = jax.jit(jax.grad(L.tpo_loss))
_grpo_advantages = jax.jit(L.grpo_advantages)
_k3 = jax.jit(L.k3_kl)
_candidate_rewards = jax.jit(tasks.candidate_rewards, static_argnums=2)


def _scores(rng: np.random.Generator, shape, trial: int) -> np.ndarray:
    kind = trial % 5
    if kind == 0:
        s = rng.normal(size=shape)
    elif kind == 1:
        s = (rng.random(shape) < 0.3).astype(float)  # 0/1 rewards
    elif kind == 2:
        s = rng.integers(0, 3, size=shape).astype(float)
    elif kind == 3:
        s = 100.0 * rng.normal(size=shape) + 40.0  # large scale and offset
    else:
        s = rng.uniform(size=shape)
    s = s.reshape(-1, shape[-1])
    if s.shape[0] > 1:  # one all-equal group per batch
        s[0] = float(rng.integers(0, 2))
    elif trial % 7 == 3:
        s[0] = 1.0
    return s.reshape(shape).astype(np.float32)


def _cases(seed: int, trials: int, shapes=SHAPES) -> Iterator[tuple[int, np.random.Generator, tuple]]:
    rng = np.random.default_rng(seed)
    for t in range(trials):
        yield t, rng, shapes[t % len(shapes)]


def _f32(x) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def _softmax(x, axis=-1):
    return np.asarray(jax.nn.softmax(_f32(x), axis=axis))


_TRACE_ERRORS = (
    jax.errors.TracerArrayConversionError,
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerIntegerConversionError,
)


class _Caller:
    """Calls the reader's ``fn`` under ``jax.jit`` (one compile per input shape instead of one per operation),
    or eagerly from the first input on which it cannot be traced (NumPy code, Python control flow on values)."""

    def __init__(self, fn: Callable, static_argnums=()):
        self.fn, self.eager = fn, False
        self.jitted = jax.jit(fn, static_argnums=static_argnums)

    def __call__(self, *args):
        if not self.eager:
            try:
                return self.jitted(*args)
            except _TRACE_ERRORS:
                self.eager = True
        return self.fn(*args)


# --------------------------------------------------------------------------------------------
# chapter 1: standardisation
# --------------------------------------------------------------------------------------------
def _begin(fn, trials, show_hints, **caller) -> "_Caller":
    """Validate a checker's arguments, set whether known-bug hints are shown, and wrap the reader's ``fn``."""
    _check_callable("fn", fn)
    _check_trials(trials)
    _SHOW_HINTS[0] = bool(show_hints)
    return _Caller(fn, **caller)


def check_standardize(fn: Callable, trials: int = 15, seed: int = 0, show_hints: bool = True) -> None:
    r"""Check ``fn(scores) -> u``, the paper's group z-score over the last axis.

    .. math:: c = s - \bar s,\quad \sigma = \sqrt{\tfrac1K\textstyle\sum_i c_i^2},\quad
              u = c/\sigma \text{ if } \sigma > 10^{-6} \text{ else } c

    Reference: :func:`tpo_core.losses.standardize`. Shapes ``[..., K]`` in and out.
    """
    call_fn = _begin(fn, trials, show_hints)
    for t, rng, shape in _cases(seed, trials):
        s = _scores(rng, shape, t)
        c = s - s.mean(-1, keepdims=True)
        hints = {
            "the sample std (ddof=1) instead of the population std": lambda: c / c.std(-1, ddof=1, keepdims=True),
            "dividing by σ without the zero-variance rule (an all-equal group must give u = 0)": lambda: (
                c / c.std(-1, keepdims=True)
            ),
            "a mean and std over the whole batch instead of over each group (the last axis)": lambda: (
                (s - s.mean()) / s.std()
            ),
            "the centred scores without dividing by σ": lambda: c,
        }
        _compare(f"{_name(fn)}(scores)", call_fn(_f32(s)), _standardize(s), {"scores": s}, hints)
    _passed("check_standardize", fn, trials, "tpo_core.losses.standardize")


# --------------------------------------------------------------------------------------------
# chapter 2: the target
# --------------------------------------------------------------------------------------------
def check_tpo_target(fn: Callable, trials: int = 15, seed: int = 1, show_hints: bool = True) -> None:
    r"""Check ``fn(logp_old, scores, eta) -> q``, TPO's target over the last axis.

    .. math:: q = \mathrm{softmax}\big(\log\mathrm{softmax}(\ell^{old}) + u/\eta\big) \propto p^{old} e^{u/\eta}

    ``logp_old`` are sequence log-probabilities (not normalised over the group), ``u`` the
    standardised scores (:func:`check_standardize`). Reference: :func:`tpo_core.losses.tpo_target`.
    """
    call_fn = _begin(fn, trials, show_hints)
    for t, rng, shape in _cases(seed, trials):
        s = _scores(rng, shape, t)
        lo = (3.0 * rng.normal(size=shape) - 12.0).astype(np.float32)
        eta = float(rng.choice([1.0, 0.25, 0.5, 2.0, 4.0])) if t % 3 else 1.0
        u = np.asarray(_standardize(s))
        c = s - s.mean(-1, keepdims=True)
        sd1 = c.std(-1, ddof=1, keepdims=True)
        hints = {
            "dropping the anchor p_old (q = softmax(u/η))": lambda: _softmax(u / eta),
            "multiplying by η instead of dividing (u·η)": lambda: _softmax(lo + u * eta),
            "a softmax over the wrong axis (not the group axis, the last one)": lambda: _softmax(lo + u / eta, axis=0),
            "the sample std (ddof=1) in the standardisation": lambda: _softmax(
                lo + np.where(sd1 > 1e-6, c / np.where(sd1 > 1e-6, sd1, 1.0), c) / eta
            ),
            "raw scores instead of standardised ones": lambda: _softmax(lo + s / eta),
        }
        _compare(
            f"{_name(fn)}(logp_old, scores, eta={eta:g})",
            call_fn(_f32(lo), _f32(s), eta),
            _tpo_target(lo, s, eta),
            {"logp_old": lo, "scores": s},
            hints,
        )
    _passed("check_tpo_target", fn, trials, "tpo_core.losses.tpo_target")


# --------------------------------------------------------------------------------------------
# chapter 3: the loss and its gradient; GRPO's pieces; sequence log-probs
# --------------------------------------------------------------------------------------------
def check_tpo_loss_grad(fn: Callable, trials: int = 8, seed: int = 2, show_hints: bool = True) -> None:
    r"""Check ``fn(logp, logp_old, scores, eta) -> L`` in value **and** gradient with respect to ``logp``.

    .. math:: L = \operatorname{mean}_{groups}\Big(-\sum_i q_i \log\mathrm{softmax}(\ell)_i\Big),\qquad
              \partial L/\partial \ell_i = (p_i - q_i)/G

    with ``q`` the frozen target of :func:`check_tpo_target`. Both at the rollout point
    (``logp == logp_old``, the first epoch) and after the policy has moved. ``fn`` must be written
    with ``jax.numpy``: the checker differentiates it with ``jax.grad``. Reference:
    :func:`tpo_core.losses.tpo_loss`.
    """
    call_fn = _begin(fn, trials, show_hints)
    grads = {}
    for t, rng, shape in _cases(seed, trials, shapes=(SHAPES[0], SHAPES[2])):
        s = _scores(rng, shape, t)
        lo = (2.0 * rng.normal(size=shape) - 8.0).astype(np.float32)
        eta = float(rng.choice([1.0, 0.5, 2.0])) if t % 3 else 1.0
        for moved in (False, True):
            lp = (lo + rng.normal(size=shape)).astype(np.float32) if moved else lo.copy()
            where = "after the policy moved (logp != logp_old)" if moved else "at the rollout (logp == logp_old)"
            inputs = {"logp": lp, "logp_old": lo, "scores": s}
            call = f"{_name(fn)}(logp, logp_old, scores, eta={eta:g}) {where}"
            q = lambda: np.asarray(_tpo_target(lo, s, eta))  # noqa: E731 (for the hints only)
            log_p = lambda: np.asarray(jax.nn.log_softmax(_f32(lp)))  # noqa: E731
            _compare(
                call,
                call_fn(_f32(lp), _f32(lo), _f32(s), eta),
                _tpo_loss(lp, lo, s, eta),
                inputs,
                {
                    "summing over groups instead of averaging": lambda: -(q() * log_p()).sum(),
                    "the raw log-probs instead of log softmax over the group": lambda: -(q() * lp).sum(-1).mean(),
                },
            )
            got_g = _grad(fn, grads, lp, lo, s, eta)
            want_g = _tpo_loss_grad(_f32(lp), lo, s, eta)
            _compare(
                f"the gradient of {call} with respect to logp",
                got_g,
                want_g,
                inputs,
                {
                    "differentiating through q: the value is right but q is not frozen (compute it from logp_old "
                    "only, or wrap it in jax.lax.stop_gradient)": lambda: np.asarray(
                        jax.grad(
                            lambda x: (
                                -(jax.nn.softmax(jax.nn.log_softmax(x) + _standardize(s) / eta) * jax.nn.log_softmax(x))
                                .sum(-1)
                                .mean()
                            )
                        )(_f32(lp))
                    ),
                    "(p - q) without dividing by the number of groups G": lambda: np.exp(log_p()) - q(),
                },
            )
    _passed("check_tpo_loss_grad", fn, trials * 2, "tpo_core.losses.tpo_loss and its jax.grad")


def _grad(fn, cache: dict, logp, logp_old, scores, eta):
    """jax.grad of ``fn`` in its first argument: compiled once per checker run (eager if ``fn`` cannot be jitted)."""

    def scalar_fn(x, lo, s, e):
        return jnp.asarray(fn(x, lo, s, e)).reshape(())

    args = (_f32(logp), _f32(logp_old), _f32(scores))
    try:
        if "jit" not in cache:
            cache["jit"] = jax.jit(jax.grad(scalar_fn))
        if cache["jit"] is not None:
            try:
                return cache["jit"](*args, eta)
            except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError):
                cache["jit"] = None  # Python control flow on values: differentiate eagerly
        return jax.grad(scalar_fn)(*args, eta)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError, TypeError) as e:
        raise AssertionError(
            f"jax.grad cannot differentiate {_name(fn)}: write it with jax.numpy "
            f"(jnp, jax.nn), not NumPy ({type(e).__name__}: {str(e).splitlines()[0]})"
        ) from None


def check_grpo_advantages(fn: Callable, trials: int = 15, seed: int = 3, show_hints: bool = True) -> None:
    r"""Check ``fn(scores) -> A``, GRPO's group advantage as the paper uses it.

    .. math:: A_i = \frac{s_i - \bar s}{\sigma + 10^{-8}},\qquad \sigma = \sqrt{\tfrac1K\textstyle\sum_i (s_i-\bar s)^2}

    (population std). Reference: :func:`tpo_core.losses.grpo_advantages`.
    """
    call_fn = _begin(fn, trials, show_hints)
    for t, rng, shape in _cases(seed, trials):
        s = _scores(rng, shape, t)
        c = s - s.mean(-1, keepdims=True)
        hints = {
            "the sample std (ddof=1, TRL/verl) instead of the population std (the paper)": lambda: (
                c / (c.std(-1, ddof=1, keepdims=True) + 1e-8)
            ),
            "dividing by σ without the + 1e-8 (an all-equal group must give A = 0, not NaN)": lambda: (
                c / c.std(-1, keepdims=True)
            ),
            "a mean and std over the whole batch instead of over each group": lambda: (s - s.mean()) / (s.std() + 1e-8),
        }
        _compare(f"{_name(fn)}(scores)", call_fn(_f32(s)), _grpo_advantages(s), {"scores": s}, hints)
    _passed("check_grpo_advantages", fn, trials, "tpo_core.losses.grpo_advantages")


def check_k3(fn: Callable, trials: int = 12, seed: int = 4, show_hints: bool = True) -> None:
    r"""Check ``fn(logp, logp_ref) -> k3``, Schulman's k3 estimator of KL(π_θ ‖ π_ref), elementwise.

    .. math:: k_3 = r - 1 - \log r,\qquad r = \pi_{ref}/\pi_\theta = e^{\,\ell_{ref} - \ell}

    evaluated at samples from π_θ's rollout; ``logp``/``logp_ref`` are log-probabilities of the same
    samples (any shape). Reference: :func:`tpo_core.losses.k3_kl`.
    """
    call_fn = _begin(fn, trials, show_hints)
    for t, rng, shape in _cases(seed, trials):
        lp = (rng.normal(size=shape) - 3.0).astype(np.float32)
        lr = (lp + rng.normal(size=shape) * (0.1 + t % 4)).astype(np.float32)
        d = (lr - lp).astype(np.float64)
        hints = {
            "the ratio the wrong way round (r = π_θ/π_ref)": lambda: np.exp(-d) - 1 + d,
            "k1 = -log r (unbiased but can be negative)": lambda: -d,
            "k2 = (log r)²/2": lambda: 0.5 * d**2,
            "forgetting the - 1 (r - log r)": lambda: np.exp(d) - d,
        }
        _compare(
            f"{_name(fn)}(logp, logp_ref)",
            call_fn(_f32(lp), _f32(lr)),
            _k3(lp, lr),
            {"logp": lp, "logp_ref": lr},
            hints,
            atol=1e-4,
            rtol=1e-4,
        )
    _passed("check_k3", fn, trials, "tpo_core.losses.k3_kl")


def reference_sequence_logprob(token_logp, mask):
    r"""The sequence log-probability :math:`\ell = \sum_t m_t \log\pi(y_t \mid x, y_{<t})`, shapes ``[..., T]`` → ``[...]``.

    The paper's convention (a **sum**, no length normalisation), as
    :func:`tpo_core.bridge.torch_ops.sequence_logp` computes it in PyTorch.
    """
    return jnp.where(jnp.asarray(mask, bool), jnp.asarray(token_logp, jnp.float32), 0.0).sum(-1)


def check_sequence_logprob(fn: Callable, trials: int = 12, seed: int = 5, show_hints: bool = True) -> None:
    r"""Check ``fn(token_logp, mask) -> ell``: a completion's log-probability from its tokens.

    ``token_logp`` ``[..., T]`` holds :math:`\log\pi(y_t\mid x, y_{<t})` and, where ``mask`` is False
    (padding after the completion ends), arbitrary numbers; the result ``[...]`` is
    :math:`\sum_t m_t \log\pi(y_t\mid\cdot)` (:func:`reference_sequence_logprob`).
    """
    call_fn = _begin(fn, trials, show_hints)
    for _, rng, shape in _cases(seed, trials):
        T = shape[-1] + 3
        full = shape[:-1] + (T,)
        tl = (-rng.exponential(1.0, size=full)).astype(np.float32)
        lengths = rng.integers(1, T + 1, size=full[:-1])
        mask = np.arange(T) < lengths[..., None]
        tl = np.where(mask, tl, rng.normal(size=full) * 5.0).astype(np.float32)  # padding holds junk
        m = mask.astype(np.float64)
        hints = {
            "a mean over tokens instead of a sum (length normalisation: not a log-probability)": lambda: (
                (tl * m).sum(-1) / np.maximum(m.sum(-1), 1.0)
            ),
            "ignoring the mask (padding tokens counted)": lambda: tl.sum(-1),
            "a mean over all T positions": lambda: (tl * m).mean(-1),
        }
        _compare(
            f"{_name(fn)}(token_logp, mask)",
            call_fn(_f32(tl), jnp.asarray(mask)),
            reference_sequence_logprob(tl, mask),
            {"token_logp": tl, "mask": mask},
            hints,
        )
    _passed("check_sequence_logprob", fn, trials, "the token-sum log-probability")


# --------------------------------------------------------------------------------------------
# chapter 5: candidate rewards
# --------------------------------------------------------------------------------------------
def check_candidate_rewards(fn: Callable, trials: int = 8, seed: int = 6, show_hints: bool = True) -> None:
    r"""Check ``fn(cand_correct, behaviour_correct, reward) -> scores`` for ``reward`` in ``("bag", "sequential")``.

    ``cand_correct`` ``[B, H, K]`` (bool): candidate k at state t equals the target token;
    ``behaviour_correct`` ``[B, H]`` (bool): the behaviour answer's token t is right (candidate 0 is the
    behaviour token). Bag: :math:`s_{t,k} = \mathbb 1\{c_{t,k}\}`; sequential:
    :math:`s_{t,k} = \prod_{j<t}\mathbb 1\{a_j\text{ right}\}\cdot\mathbb 1\{c_{t,k}\}`.
    Reference: :func:`tpo_core.tasks.candidate_rewards`.
    """
    call_fn = _begin(fn, trials, show_hints, static_argnums=2)
    rng = np.random.default_rng(seed)
    for t in range(trials):
        B, H, K = ((3, 6, 4), (2, 5, 3))[t % 2]
        bc = rng.random((B, H)) < 0.75
        bc[0, :] = True
        bc[0, 1] = False  # a first mistake at t = 1 in row 0
        cc = rng.random((B, H, K)) < 0.5
        cc[..., 0] = bc  # candidate 0 is the behaviour token
        cc[0, 1, 1] = True  # ... and a correct alternative at that state
        prefix = np.cumprod(bc, axis=-1).astype(np.float64)
        c = cc.astype(np.float64)
        for reward in ("bag", "sequential"):
            hints = (
                {
                    "a prefix that includes state t itself (the candidates at t replace a_t, so only a_<t must be right)": lambda: (
                        prefix[..., None] * c
                    ),
                    "the bag reward (no prefix)": lambda: c,
                    "the behaviour token's sequential reward for every candidate": lambda: np.broadcast_to(
                        prefix[..., None], c.shape
                    ),
                    "a prefix over the states that come after t": lambda: (
                        np.flip(np.cumprod(np.flip(bc, -1), -1), -1)[..., None] * c
                    ),
                }
                if reward == "sequential"
                else {}
            )
            _compare(
                f"{_name(fn)}(cand_correct, behaviour_correct, {reward!r})",
                call_fn(jnp.asarray(cc), jnp.asarray(bc), reward),
                _candidate_rewards(jnp.asarray(cc), jnp.asarray(bc), reward),
                {"behaviour_correct": bc.astype(int), "cand_correct": cc.astype(int)},
                hints,
            )
    _passed("check_candidate_rewards", fn, trials * 2, "tpo_core.tasks.candidate_rewards")


# --------------------------------------------------------------------------------------------
# chapter 9: mini-batches of whole groups
# --------------------------------------------------------------------------------------------
# (n_prompts, K, n_minibatches): K = 1 never (a group of one has no signal), n_minibatches from 1 to n_prompts
_MINIBATCH_CASES = ((12, 4, 3), (6, 5, 2), (10, 3, 5), (8, 6, 4), (9, 7, 3), (5, 3, 1), (7, 2, 7), (12, 8, 6))


def _hint(description: str) -> list[str]:
    return [f"  hint: that looks like {description}"] if _SHOW_HINTS[0] else []


def _index_arrays(call: str, out, n_minibatches: int) -> list[np.ndarray]:
    """``out`` as a list of 1-D integer arrays (lists, NumPy, JAX or torch), or AssertionError saying why not."""
    try:
        batches = [np.asarray(b) for b in out]
    except TypeError:
        raise AssertionError(f"{call} returned {type(out).__name__}, expected a list of index arrays") from None
    if len(batches) != n_minibatches:
        raise AssertionError(f"{call} returned {len(batches)} mini-batch(es), expected n_minibatches = {n_minibatches}")
    for j, b in enumerate(batches):
        if b.ndim != 1:
            raise AssertionError(f"{call}: mini-batch {j} has shape {b.shape}, expected a 1-D array of row indices")
        if b.dtype == bool or not np.issubdtype(b.dtype, np.integer):
            raise AssertionError(
                f"{call}: mini-batch {j} holds {b.dtype} values, expected integer row indices (e.g. np.int64)"
            )
    return batches


def _cut_group(batches: list[np.ndarray], K: int):
    """The first mini-batch whose ``reshape(-1, K)`` is not one whole group per row: ``(j, prompt)``, else None."""
    for j, b in enumerate(batches):
        if b.size % K:
            return j, int(b[0] // K) if b.size else -1
        owner = b.reshape(-1, K) // K
        bad = np.flatnonzero((owner != owner[:, :1]).any(1) | (np.sort(b.reshape(-1, K), 1) % K != np.arange(K)).any(1))
        if bad.size:
            return j, int(owner[bad[0], 0])
    return None


def _whole_groups(owner: np.ndarray, n_prompts: int, K: int) -> bool:
    """True when every prompt in ``owner`` (each row's prompt) appears exactly 0 or K times."""
    return set(np.bincount(owner, minlength=n_prompts).tolist()) <= {0, K}


@jax.jit
def _minibatch_and_full_loss(logp, logp_old, scores, index, eta):
    """The mean over mini-batches ``index`` ``[M, rows]`` of ``tpo_loss`` on each (as ``[groups, K]``), and the
    full-batch ``tpo_loss`` on ``[n_prompts, K]``: one compile per shape."""
    K = logp.shape[-1]
    take = lambda a, rows: a.reshape(-1)[rows].reshape(-1, K)  # noqa: E731
    per_batch = jax.vmap(lambda rows: L.tpo_loss(take(logp, rows), take(logp_old, rows), take(scores, rows), eta))
    return per_batch(index).mean(), L.tpo_loss(logp, logp_old, scores, eta)


def _prompt_order(batches: list[np.ndarray], K: int) -> np.ndarray:
    return np.concatenate(batches).reshape(-1, K)[:, 0] // K


def check_group_minibatches(fn: Callable, trials: int = 8, seed: int = 7, show_hints: bool = True) -> None:
    r"""Check ``fn(n_prompts, K, n_minibatches, rng) -> [idx_0, …]``: shuffled mini-batches of whole groups.

    A trainer stores the ``n_prompts * K`` completions prompt-major: row ``r`` is completion ``r % K``
    of prompt ``r // K``. ``fn`` gets Python integers and a ``numpy.random.Generator`` and must return
    ``n_minibatches`` 1-D integer index arrays over those rows that

    - hold every row exactly once, together;
    - hold whole groups, a group's ``K`` rows next to each other (``rows[idx].reshape(-1, K)`` is one
      group per row: TPO's softmax and standardisation run over the group);
    - hold equally many groups (``n_prompts / n_minibatches``), so that the mean of the mini-batch
      losses is the full-batch loss;
    - list the prompts in an order drawn from ``rng``: shuffled, and the same again for a generator
      with the same seed;

    and ``fn`` must raise ``ValueError`` when ``n_minibatches`` does not divide ``n_prompts``. On random
    groups the checker then compares the mean over the mini-batches of :func:`tpo_core.losses.tpo_loss`
    with the full-batch loss.
    """
    _check_callable("fn", fn)
    _check_trials(trials)
    _SHOW_HINTS[0] = bool(show_hints)
    rng = np.random.default_rng(seed)
    orders = []
    for t in range(trials):
        n, K, M = _MINIBATCH_CASES[t % len(_MINIBATCH_CASES)]
        call = f"{_name(fn)}(n_prompts={n}, K={K}, n_minibatches={M}, rng)"
        child = int(rng.integers(2**31))
        batches = _index_arrays(call, fn(n, K, M, np.random.default_rng(child)), M)
        rows = np.concatenate(batches)

        # every row exactly once
        outside = rows[(rows < 0) | (rows >= n * K)]
        if outside.size:
            raise AssertionError(f"{call} returned row indices outside 0 … {n * K - 1}: {_fmt(np.unique(outside))}")
        counts = np.bincount(rows, minlength=n * K)
        if (counts != 1).any():
            dup, missing = np.flatnonzero(counts > 1), np.flatnonzero(counts == 0)
            lines = [f"{call} does not return every row exactly once (rows are 0 … {n * K - 1}):"]
            if dup.size:
                lines.append(f"  rows that appear more than once: {_fmt(dup)}")
            if missing.size:
                lines.append(f"  rows that never appear: {_fmt(missing)}")
            if dup.size and (counts.reshape(n, K) == counts.reshape(n, K)[:, :1]).all():
                lines += _hint(
                    "prompts drawn with replacement (rng.choice(n_prompts, n_prompts) or rng.integers) "
                    "instead of a permutation (rng.permutation(n_prompts))"
                )
            elif dup.size:
                lines += _hint("duplicate rows: rows drawn with replacement, or mini-batches that overlap")
            else:
                lines += _hint("missing rows: a mini-batch size rounded down, or a slice that stops early")
            raise AssertionError("\n".join(lines))

        # whole groups, each group's rows together
        cut = _cut_group(batches, K)
        if cut is not None:
            j, p = cut
            b = batches[j]
            lines = [
                f"mini-batch {j} of {call} does not hold whole groups, one after the other:",
                f"  mini-batch {j} = {_fmt(b)}",
            ]
            if 0 <= p < n and (b // K == p).sum() != K:
                lines.append(
                    f"  it holds rows {_fmt(np.sort(b[b // K == p]))} of prompt {p}, whose group is rows "
                    f"{p * K} … {p * K + K - 1}"
                )
            if all(_whole_groups(b // K, n, K) for b in batches):
                lines.append(
                    f"  every prompt it holds is complete, but its K rows are not next to each other: "
                    f"idx.reshape(-1, K)[0] = {_fmt(b[:K])} mixes prompts {_fmt(np.unique(b[:K] // K))}; "
                    f"idx.reshape(-1, K) must give one group per row"
                )
            elif all(_whole_groups(b % n, n, K) for b in batches):
                lines += _hint(
                    "rows laid out K-major (prompt + k * n_prompts) instead of prompt-major "
                    "(prompt * K + k): row r belongs to prompt r // K"
                )
            elif _cut_group([rows], K) is None:
                lines += _hint(
                    "chunking the rows at boundaries that are not multiples of K (np.array_split of the "
                    "rows, or a row count per mini-batch that K does not divide)"
                )
            else:
                lines += _hint(
                    "shuffling rows (rng.permutation(n_prompts * K)) instead of prompts: permute the "
                    "prompts, then take all K rows of each"
                )
            raise AssertionError("\n".join(lines))

        # equal sizes
        sizes = [b.size for b in batches]
        if len(set(sizes)) > 1:
            raise AssertionError(
                f"{call} returned mini-batches of {sizes} rows: they must be equal "
                f"({n // M} groups of {K} each), or the mean of the mini-batch losses weights "
                f"groups unequally"
            )

        # the same batches for the same seed
        again = _index_arrays(call, fn(n, K, M, np.random.default_rng(child)), M)
        if len(again) != len(batches) or not all(np.array_equal(a, b) for a, b in zip(again, batches)):
            raise AssertionError(
                f"{call} returned different mini-batches for two generators with the same seed: "
                f"draw every random number from rng (not np.random or random), so that a run can "
                f"be reproduced"
            )
        orders.append(_prompt_order(batches, K))

        # the mean of the mini-batch losses is the full-batch loss
        lp = (2.0 * rng.normal(size=(n, K)) - 8.0).astype(np.float32)
        lo = (lp + rng.normal(size=(n, K))).astype(np.float32)
        s = _scores(rng, (n, K), t)
        eta = float(rng.choice([1.0, 0.5, 2.0]))
        got, want = _minibatch_and_full_loss(lp, lo, s, np.stack(batches), eta)
        _compare(
            f"the mean over the mini-batches of {call} of tpo_core.tpo_loss",
            got,
            want,
            {"logp": lp, "logp_old": lo, "scores": s},
        )

        # n_minibatches that does not divide n_prompts: a ValueError, not cut groups or unequal batches
        bad = next(m for m in range(2, n + 2) if n % m)
        call_bad = f"{_name(fn)}(n_prompts={n}, K={K}, n_minibatches={bad}, rng)"
        try:
            out = fn(n, K, bad, np.random.default_rng(child))
        except ValueError:
            pass
        else:
            lines = [
                f"{call_bad} returned instead of raising ValueError: {n} prompts cannot be split into {bad} "
                f"equal mini-batches of whole groups"
            ]
            try:
                got = [np.asarray(b) for b in out]
                cuts = _cut_group(got, K) is not None
            except Exception:  # whatever it returned, the message above says what is wrong
                got, cuts = None, False
            if got is not None and (cuts or len({b.size for b in got}) > 1):
                lines += _hint(
                    "splitting the rows into n_minibatches contiguous chunks (np.array_split), which "
                    "cuts groups or gives unequal mini-batches when n_minibatches does not divide "
                    "n_prompts"
                )
            raise AssertionError("\n".join(lines))

    # shuffled, and by rng
    if all(np.array_equal(o, np.arange(o.size)) for o in orders):
        raise AssertionError(
            f"{_name(fn)} never shuffles the prompts: in all {trials} calls they come in their stored "
            f"order 0, 1, 2, …; draw their order from rng (rng.permutation(n_prompts)) so that "
            f"each mini-batch mixes prompts from the whole batch"
        )
    n, K, M = _MINIBATCH_CASES[0]
    seen = {
        tuple(
            _prompt_order(
                _index_arrays(
                    f"{_name(fn)}(n_prompts={n}, K={K}, n_minibatches={M}, rng)",
                    fn(n, K, M, np.random.default_rng(seed + 1000 + i)),
                    M,
                ),
                K,
            )
        )
        for i in range(3)
    }
    if len(seen) == 1:
        raise AssertionError(
            f"{_name(fn)}(n_prompts={n}, K={K}, n_minibatches={M}, rng) orders the prompts the same "
            f"way for three generators with different seeds: draw the order from the rng argument "
            f"(rng.permutation(n_prompts)), not from a fixed seed"
        )
    _passed("check_group_minibatches", fn, trials, "whole-group mini-batches and tpo_core.losses.tpo_loss")


# --------------------------------------------------------------------------------------------
# chapter 10: per-sequence policy-gradient weights at the current policy
# --------------------------------------------------------------------------------------------
def check_sequence_weights(fn: Callable, trials: int = 8, seed: int = 8, show_hints: bool = True) -> None:
    r"""Check ``fn(logp, logp_old, scores, eta) -> w``: per-sequence weights whose policy gradient is TPO's.

    For groups ``[G, K]`` (``N = G K`` sequences) and the surrogate :math:`-\frac1N\sum_i w_i\,\ell_i(\theta)`,

    .. math:: w_i = -N\,\frac{\partial L_{TPO}}{\partial \ell_i} = K\,(q_i - p_i),\qquad
              p = \mathrm{softmax}(\ell),\quad q \propto p^{old} e^{u/\eta}

    at the **current** log-probs ``logp``, with the frozen target ``q`` of :func:`check_tpo_target`.
    At ``logp == logp_old`` (the first optimizer step on a rollout) it is Route A's
    :func:`tpo_core.bridge.torch_ops.tpo_sequence_weights`, :math:`K(q - p^{old})`; after a step it is
    not. Checked at the rollout and after the policy has moved. Reference: ``jax.grad`` of
    :func:`tpo_core.losses.tpo_loss`, times :math:`-N`.
    """
    call_fn = _begin(fn, trials, show_hints)
    for t, rng, shape in _cases(seed, trials, shapes=((4, 8), (3, 5), (2, 16))):
        G, K = shape
        s = _scores(rng, shape, t)
        lo = (2.0 * rng.normal(size=shape) - 8.0).astype(np.float32)
        eta = float(rng.choice([1.0, 0.5, 2.0])) if t % 3 else 1.0
        u = np.asarray(_standardize(s))
        q = np.asarray(_tpo_target(lo, s, eta))
        for moved in (False, True):
            lp = (lo + rng.normal(size=shape)).astype(np.float32) if moved else lo.copy()
            where = "after the policy moved (logp != logp_old)" if moved else "at the rollout (logp == logp_old)"
            p, p_old = _softmax(lp), _softmax(lo)
            want = -G * K * np.asarray(_tpo_loss_grad(_f32(lp), lo, s, eta), np.float64)
            hints = {
                "reusing Route A's first-step weights K(q - p_old) after the policy moved (they are exact at "
                "θ_old only: the weight depends on θ through p = softmax(logp))": lambda: K * (q - p_old),
                "forgetting the factor K (q - p instead of K(q - p))": lambda: q - p,
                "the wrong sign (K(p - q))": lambda: K * (p - q),
                "the loss gradient (p - q)/G instead of the weight -N ∂L/∂logp = K(q - p)": lambda: (p - q) / G,
                "a softmax over the wrong axis (not the group axis, the last one)": lambda: (
                    K * (_softmax(lo + u / eta, axis=0) - _softmax(lp, axis=0))
                ),
                "p = softmax(logp) over the wrong axis (not the group axis, the last one)": lambda: (
                    K * (q - _softmax(lp, axis=0))
                ),
                "building q from the current p instead of p_old (q ∝ p_old·exp(u/η) is frozen at the rollout)": lambda: (
                    K * (_softmax(lp + u / eta) - p)
                ),
            }
            _compare(
                f"{_name(fn)}(logp, logp_old, scores, eta={eta:g}) {where}",
                call_fn(_f32(lp), _f32(lo), _f32(s), eta),
                want,
                {"logp": lp, "logp_old": lo, "scores": s},
                hints,
            )
    _passed("check_sequence_weights", fn, trials * 2, "-N · jax.grad(tpo_core.losses.tpo_loss)")
