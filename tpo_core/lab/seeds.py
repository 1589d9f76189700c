"""The standard error over seeds, in a module of its own that imports nothing of the project: the figures
(:mod:`tpo_core.lab.figures`, a leaf of the lab) draw their ±1 SE bands with it, and the statistics
(:mod:`tpo_core.lab.reproduce.stats`), the reports and the LLM experiment use the same formula."""

from __future__ import annotations

import math

import numpy as np


def seed_se(x, axis=None):
    """Standard error of the mean over seeds (sample std / √n), the one formula every report, figure and the
    CLI use. ``axis=None``: x is one value per seed, returns a float (NaN for fewer than two seeds);
    ``axis=0``: x is [S, ...], returns the SE of each column (NaN columns for one seed)."""
    x = np.asarray(x, float)
    n = x.size if axis is None else x.shape[axis]
    se = x.std(axis=axis, ddof=1) / math.sqrt(n) if n > 1 else np.full(np.shape(x.mean(axis=axis)), np.nan)
    return float(se) if axis is None else se
