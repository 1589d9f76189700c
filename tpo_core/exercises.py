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

    from tpo_core import exercises

    def my_tpo_target(logp_old, scores, eta):
        raise NotImplementedError          # your code here

    exercises.attempt(exercises.check_tpo_target, my_tpo_target)  # "not solved yet: ..." until it passes
    exercises.check_tpo_target(my_tpo_target)                     # raises AssertionError until it passes

Checkers and the chapters that use them: :func:`check_standardize` (ch. 1), :func:`check_tpo_target`
(ch. 2), :func:`check_tpo_loss_grad`, :func:`check_grpo_advantages`, :func:`check_k3` and
:func:`check_sequence_logprob` (ch. 3, and the silent bug of ch. 7), :func:`check_candidate_rewards`
(the silent bug of ch. 5).
"""
from __future__ import annotations

import numbers
from typing import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from . import losses as L
from . import tasks

__all__ = ["attempt", "check_standardize", "check_tpo_target", "check_tpo_loss_grad", "check_grpo_advantages",
           "check_k3", "check_sequence_logprob", "check_candidate_rewards"]

ATOL = 1e-4   # float32 on values of order 1 (u up to sqrt(K - 1), probabilities, log-probs)
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
    if isinstance(trials, bool) or not isinstance(trials, numbers.Integral) or trials < 1:
        raise ValueError(f"trials must be an integer >= 1, got {trials!r}")


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


_SHOW_HINTS = [True]   # set by each checker's ``show_hints``


def _compare(what: str, got, want, inputs: dict, hints: dict | None = None, atol: float = ATOL,
             rtol: float = RTOL) -> None:
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
    if got.ndim >= 2 and got.size > 24:   # a big array: show the first group (last axis) that differs
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
        except Exception:  # noqa: BLE001 - a hint that cannot be evaluated is simply not shown
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
        s = (rng.random(shape) < 0.3).astype(float)              # 0/1 rewards
    elif kind == 2:
        s = rng.integers(0, 3, size=shape).astype(float)
    elif kind == 3:
        s = 100.0 * rng.normal(size=shape) + 40.0                # large scale and offset
    else:
        s = rng.uniform(size=shape)
    s = s.reshape(-1, shape[-1])
    if s.shape[0] > 1:                                           # one all-equal group per batch
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


_TRACE_ERRORS = (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError,
                 jax.errors.TracerIntegerConversionError)


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
            "dividing by σ without the zero-variance rule (an all-equal group must give u = 0)":
                lambda: c / c.std(-1, keepdims=True),
            "a mean and std over the whole batch instead of over each group (the last axis)":
                lambda: (s - s.mean()) / s.std(),
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
            "a softmax over the wrong axis (not the group axis, the last one)":
                lambda: _softmax(lo + u / eta, axis=0),
            "the sample std (ddof=1) in the standardisation": lambda: _softmax(lo + np.where(sd1 > 1e-6, c / np.where(
                sd1 > 1e-6, sd1, 1.0), c) / eta),
            "raw scores instead of standardised ones": lambda: _softmax(lo + s / eta),
        }
        _compare(f"{_name(fn)}(logp_old, scores, eta={eta:g})", call_fn(_f32(lo), _f32(s), eta),
                 _tpo_target(lo, s, eta), {"logp_old": lo, "scores": s}, hints)
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
            _compare(call, call_fn(_f32(lp), _f32(lo), _f32(s), eta), _tpo_loss(lp, lo, s, eta), inputs, {
                "summing over groups instead of averaging": lambda: -(q() * log_p()).sum(),
                "the raw log-probs instead of log softmax over the group": lambda: -(q() * lp).sum(-1).mean(),
            })
            got_g = _grad(fn, grads, lp, lo, s, eta)
            want_g = _tpo_loss_grad(_f32(lp), lo, s, eta)
            _compare(f"the gradient of {call} with respect to logp", got_g, want_g, inputs, {
                "differentiating through q: the value is right but q is not frozen (compute it from logp_old "
                "only, or wrap it in jax.lax.stop_gradient)": lambda: np.asarray(jax.grad(lambda x: -(
                    jax.nn.softmax(jax.nn.log_softmax(x) + _standardize(s) / eta)
                    * jax.nn.log_softmax(x)).sum(-1).mean())(_f32(lp))),
                "(p - q) without dividing by the number of groups G": lambda: np.exp(log_p()) - q(),
            })
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
                cache["jit"] = None             # Python control flow on values: differentiate eagerly
        return jax.grad(scalar_fn)(*args, eta)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError, TypeError) as e:
        raise AssertionError(f"jax.grad cannot differentiate {_name(fn)}: write it with jax.numpy "
                             f"(jnp, jax.nn), not NumPy ({type(e).__name__}: {str(e).splitlines()[0]})") from None


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
            "the sample std (ddof=1, TRL/verl) instead of the population std (the paper)":
                lambda: c / (c.std(-1, ddof=1, keepdims=True) + 1e-8),
            "dividing by σ without the + 1e-8 (an all-equal group must give A = 0, not NaN)":
                lambda: c / c.std(-1, keepdims=True),
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
        _compare(f"{_name(fn)}(logp, logp_ref)", call_fn(_f32(lp), _f32(lr)), _k3(lp, lr),
                 {"logp": lp, "logp_ref": lr}, hints, atol=1e-4, rtol=1e-4)
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
    for t, rng, shape in _cases(seed, trials):
        T = shape[-1] + 3
        full = shape[:-1] + (T,)
        tl = (-rng.exponential(1.0, size=full)).astype(np.float32)
        lengths = rng.integers(1, T + 1, size=full[:-1])
        mask = np.arange(T) < lengths[..., None]
        tl = np.where(mask, tl, rng.normal(size=full) * 5.0).astype(np.float32)   # padding holds junk
        m = mask.astype(np.float64)
        hints = {
            "a mean over tokens instead of a sum (length normalisation: not a log-probability)":
                lambda: (tl * m).sum(-1) / np.maximum(m.sum(-1), 1.0),
            "ignoring the mask (padding tokens counted)": lambda: tl.sum(-1),
            "a mean over all T positions": lambda: (tl * m).mean(-1),
        }
        _compare(f"{_name(fn)}(token_logp, mask)", call_fn(_f32(tl), jnp.asarray(mask)),
                 reference_sequence_logprob(tl, mask), {"token_logp": tl, "mask": mask}, hints)
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
        bc[0, 1] = False                                  # a first mistake at t = 1 in row 0
        cc = rng.random((B, H, K)) < 0.5
        cc[..., 0] = bc                                   # candidate 0 is the behaviour token
        cc[0, 1, 1] = True                                # ... and a correct alternative at that state
        prefix = np.cumprod(bc, axis=-1).astype(np.float64)
        c = cc.astype(np.float64)
        for reward in ("bag", "sequential"):
            hints = {
                "a prefix that includes state t itself (the candidates at t replace a_t, so only a_<t must be right)":
                    lambda: prefix[..., None] * c,
                "the bag reward (no prefix)": lambda: c,
                "the behaviour token's sequential reward for every candidate": lambda: np.broadcast_to(
                    prefix[..., None], c.shape),
                "a prefix over the states that come after t": lambda: np.flip(np.cumprod(np.flip(bc, -1), -1), -1)[
                    ..., None] * c,
            } if reward == "sequential" else {}
            _compare(f"{_name(fn)}(cand_correct, behaviour_correct, {reward!r})",
                     call_fn(jnp.asarray(cc), jnp.asarray(bc), reward),
                     _candidate_rewards(jnp.asarray(cc), jnp.asarray(bc), reward),
                     {"behaviour_correct": bc.astype(int), "cand_correct": cc.astype(int)}, hints)
    _passed("check_candidate_rewards", fn, trials * 2, "tpo_core.tasks.candidate_rewards")
