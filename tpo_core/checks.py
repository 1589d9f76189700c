"""The one family of argument checks: every rule raises ``ValueError("<name> <rule>, got <value>")`` naming the
parameter. The configs (:mod:`tpo_core.config`) apply them to every field, the losses to the plain numbers of a
direct call (a traced value is checked where it was a number: in its config), the tabular models, the torch bridge
and the live engine to their own arguments; the demo wraps the same ``ValueError`` for its UI message. Imports only
the standard library (the torch bridge uses it without JAX)."""

from __future__ import annotations

import math
import numbers


def require(ok: bool, name: str, rule: str, value) -> None:
    """Raise ``ValueError("<name> <rule>, got <value!r>")`` unless ``ok``."""
    if not ok:
        raise ValueError(f"{name} {rule}, got {value!r}")


def is_real(value) -> bool:
    """A real number that is not a bool (Python or numpy scalar)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def integer(name: str, value, lo: int, hi: int | None = None) -> int:
    """An integer (not a bool, not a float) in [lo, hi] (hi None: no upper bound); returns it as an ``int``."""
    require(isinstance(value, numbers.Integral) and not isinstance(value, bool), name, "must be an integer", value)
    if hi is None:
        require(value >= lo, name, f"must be >= {lo}", value)
    else:
        require(lo <= value <= hi, name, f"must be between {lo} and {hi}", value)
    return int(value)


def as_float(value):
    """A UI's value as a float when it reads as one (a slider's float, a numeric string), else as it came (a
    check then names it)."""
    try:
        return value if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return value


def whole_number(name: str, value, lo: int, hi: int) -> int:
    """:func:`integer` for a UI's number, which may arrive as a float (8.0 from a slider) or a numeric string."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    require(math.isfinite(v) and v == int(v), name, f"must be a whole number between {lo} and {hi}", value)
    return integer(name, int(v), lo, hi)


def positive(name: str, value) -> float:
    """A finite real number > 0; returns it as a ``float``."""
    require(is_real(value) and math.isfinite(value) and value > 0, name, "must be a finite number > 0", value)
    return float(value)


def positive_if_number(name: str, value) -> None:
    """:func:`positive` for a plain (Python or numpy) number; an array or a traced value passes unchecked (the
    losses and the tabular models under ``jit``: a run's η is checked by its config, where it is a number)."""
    if isinstance(value, numbers.Number):
        positive(name, value)


def non_negative(name: str, value) -> float:
    """A finite real number >= 0; returns it as a ``float``."""
    require(is_real(value) and math.isfinite(value) and value >= 0, name, "must be a finite number >= 0", value)
    return float(value)


def eta(value, max_eta: float | None = None, name: str = "eta") -> float:
    """η: :func:`positive`, and at most ``max_eta`` when given (the demo's and the widget's bound,
    ``tpo_core.constants.MAX_ETA``)."""
    e = positive(name, value)
    if max_eta is not None:
        require(e <= max_eta, name, f"must be at most {max_eta:g}", value)
    return e


def one_of(name: str, value, allowed) -> None:
    """``value`` is one of ``allowed``."""
    require(value in allowed, name, f"must be one of {tuple(allowed)}", value)
