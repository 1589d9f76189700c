"""The demo's input checks: the library's rules (:mod:`tpo_core.checks`, the configs' ``ValueError`` naming the
parameter) raised as :class:`InputError`, which the callbacks show as a UI message.

The explorer tab checks K and η here; the training tab's :func:`validate` is the live engine's
(:func:`tpo_core.lab.live.validate`, shared with the notebook widget), wrapped the same way."""

from __future__ import annotations

import functools

from tpo_core import checks
from tpo_core.constants import MAX_ETA
from tpo_core.lab import live


class InputError(ValueError):
    """A user input the demo rejects; the message names the input and is shown in the UI."""


def _as_input_error(check):
    @functools.wraps(check)
    def wrapped(*args, **kwargs):
        try:
            return check(*args, **kwargs)
        except InputError:
            raise
        except ValueError as e:
            raise InputError(str(e)) from None

    return wrapped


@_as_input_error
def check_int(name: str, value, lo: int, hi: int) -> int:
    """A whole number in [lo, hi] (floats such as 8.0 from a slider are accepted): :func:`tpo_core.checks.whole_number`."""
    return checks.whole_number(name, value, lo, hi)


@_as_input_error
def check_eta(eta, max_eta: float = MAX_ETA) -> float:
    """η as a float in (0, max_eta] (a slider's float or a numeric string): :func:`tpo_core.checks.eta`."""
    return checks.eta(checks.as_float(eta), max_eta)


validate = _as_input_error(live.validate)
