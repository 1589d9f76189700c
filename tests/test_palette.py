"""Methods have their own colours, apart from the symbol colours (p, q, u, p − q, p_old): the intro's promise."""

from __future__ import annotations

import itertools

import numpy as np

from tpo_core import methods
from tpo_core.lab import figures


def _rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)]) / 255.0


def test_every_method_has_a_colour_far_from_every_symbol_colour():
    assert set(methods.REGISTRY) <= set(figures.METHOD_COLORS)
    for m, c in figures.METHOD_COLORS.items():
        for s, sc in figures.SYMBOL_COLORS.items():
            assert np.linalg.norm(_rgb(c) - _rgb(sc)) > 0.24, (m, c, s, sc)
        assert figures.color(m) == c
    for s, sc in figures.SYMBOL_COLORS.items():
        assert figures.color(s) == sc


def test_the_methods_drawn_together_have_distinct_colours():
    same = {frozenset(("tpo", "tpo_token")), frozenset(("grpo", "grpo_token"))}  # one method, two forms
    for a, b in itertools.combinations(figures.METHOD_COLORS, 2):
        if frozenset((a, b)) in same:
            assert figures.color(a) == figures.color(b)
        else:
            assert np.linalg.norm(_rgb(figures.color(a)) - _rgb(figures.color(b))) > 0.1, (a, b)
