"""The reference implementation's own per-seed curves for Table 3 (prompt-matched, H = 10), and the
comparison of ours against them.

The file is ``assets/token_reversal_sparse_reward_results.npz`` of github.com/JeanKaddour/tpo (20 seeds ×
2000 episodes of TPO, GRPO and DG). :func:`reference_path` finds it: ``$TPO_REFERENCE_NPZ``, else the cache
(``$TPO_CACHE_DIR`` or ``~/.cache/tpo_core``), else a download from the reference repository at a pinned
commit, verified by SHA-256. Offline and uncached, it returns None and says so in one line; the pages then
fall back to :func:`committed_comparison`, the comparison saved in ``results/table3_paper_h10/summary.json``.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import sys
import urllib.request

import numpy as np

from .. import atomic_io
from . import stats
from .paper_numbers import TABLE3

NAME = "token_reversal_sparse_reward_results.npz"
COMMIT = "6fc6e90daa9f82dfed5176b6e54ac3232ab4e621"
URL = f"https://raw.githubusercontent.com/JeanKaddour/tpo/{COMMIT}/assets/{NAME}"
SHA256 = "4ea3f2bc73a77d6cdef1cf6b3e1091e267969c3be7d85ad685eb943b2189f3a6"
CHECKPOINTS = (200, 500, 1000, 1500)
SOLVED = 0.01  # a seed counts as solved when its final error is below 1%
STEPS_THRESHOLD = 0.10  # per-seed steps to 10% error (most TPO seeds get there; never = censored at T)


def cache_path() -> pathlib.Path:
    root = pathlib.Path(os.environ.get("TPO_CACHE_DIR", pathlib.Path.home() / ".cache" / "tpo_core"))
    return root / "reference" / NAME


sha256 = atomic_io.sha256_file


def download(dest: pathlib.Path, url: str = URL, timeout: float = 10.0, expected: str = SHA256) -> bool:
    """Fetch ``url`` into ``dest`` (atomically) if its SHA-256 is ``expected``; False when offline or wrong."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            data = r.read()
    except OSError:
        return False
    if hashlib.sha256(data).hexdigest() != expected:
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".part")
    tmp.write_bytes(data)
    os.replace(tmp, dest)
    return True


def reference_path(allow_download: bool = True, verbose: bool = True, url: str = URL):
    """Where the reference curves are (module docstring), or None (with one line on stderr) if nowhere."""
    env = os.environ.get("TPO_REFERENCE_NPZ")
    if env:
        path = pathlib.Path(env)
        if path.exists():
            return path
    cached = cache_path()
    if cached.exists() and sha256(cached) == SHA256:
        return cached
    if allow_download and download(cached, url):
        if verbose:
            print(
                f"[tpo_core.lab.reproduce] downloaded the reference curves ({NAME}, sha256 verified)", file=sys.stderr
            )
        return cached
    if verbose:
        print(
            f"[tpo_core.lab.reproduce] reference curves unavailable offline ({NAME}; set TPO_REFERENCE_NPZ): no new "
            "comparison; the book reads the one committed in results/table3_paper_h10/summary.json",
            file=sys.stderr,
        )
    return None


def load_reference(path=None) -> dict:
    """{"tpo": [20, 2000], "grpo": ..., "dg": ...} from the reference NPZ (errors in [0, 1])."""
    path = pathlib.Path(path) if path is not None else reference_path()
    if path is None or not path.exists():
        raise ValueError(f"reference file {str(path)!r} not found")
    with np.load(path) as f:
        return {k[: -len("_errors")]: np.asarray(f[k], float) for k in f.files if k.endswith("_errors")}


def resolution() -> dict:
    """δ of each comparison: half the paper's TPO–GRPO gap at P, H=10 (in points of final error), and half
    the reference's gap in mean steps to 10% error (episodes), i.e. the effect Table 3 is about."""
    return dict(final=abs(TABLE3[("grpo", 10, "P")] - TABLE3[("tpo", 10, "P")]) / 2)


def compare_reference(ours: dict, path=None, checkpoints=CHECKPOINTS) -> dict:
    """Compare our per-seed error curves {method: [S, T]} with the reference's, per method: seed means ± SE at
    the checkpoints and the last episode, the fraction of seeds solved, and two-sample tests (a permutation
    test of equal means and a bootstrap 95% CI of the difference of means) on the per-seed final error and on
    the per-seed steps to 10% error, each with a verdict (see :mod:`tpo_core.lab.reproduce.stats`)."""
    ref = load_reference(path)
    ref_steps = {m: stats.per_seed_steps_to(r, STEPS_THRESHOLD) for m, r in ref.items()}
    steps_delta = abs(ref_steps["grpo"].mean() - ref_steps["tpo"].mean()) / 2 if {"tpo", "grpo"} <= set(ref) else 100.0
    delta = resolution()["final"]
    methods = {}
    for m, c in ours.items():
        c = np.asarray(c, float)
        if m not in ref:
            continue
        if c.ndim != 2:
            raise ValueError(f"curves for {m!r} must be [seeds, episodes], got shape {c.shape}")
        r = ref[m]
        cps = []
        for e in tuple(checkpoints):
            om, ose = (float(c[:, e].mean()), stats.seed_se(c[:, e])) if e < c.shape[1] else (None, None)
            cps.append(dict(episode=e, ours=om, ours_se=ose, ref=float(r[:, e].mean()), ref_se=stats.seed_se(r[:, e])))
        final_o, final_r = 100 * c[:, -1], 100 * r[:, min(c.shape[1], r.shape[1]) - 1]
        steps_o = stats.per_seed_steps_to(c, STEPS_THRESHOLD)
        methods[m] = dict(
            checkpoints=cps,
            final_episode=int(c.shape[1] - 1),
            n_ours=int(len(c)),
            n_ref=int(len(r)),
            final_ours=float(final_o.mean()),
            final_ours_se=stats.seed_se(final_o),
            final_ref=float(final_r.mean()),
            final_ref_se=stats.seed_se(final_r),
            per_seed_final_ours=final_o.tolist(),
            per_seed_final_ref=final_r.tolist(),
            solved_ours=float((final_o < 100 * SOLVED).mean()),
            solved_ref=float((final_r < 100 * SOLVED).mean()),
            final_test=stats.two_sample_verdict(final_o, final_r, delta),
            steps_ours=float(steps_o.mean()),
            steps_ref=float(ref_steps[m].mean()),
            steps_test=stats.two_sample_verdict(steps_o, ref_steps[m], steps_delta),
            comparable=c.shape[1] == r.shape[1],
        )
    if not methods:
        raise ValueError(f"no method in common with the reference (ours: {sorted(ours)}, reference: {sorted(ref)})")
    return dict(
        checkpoints=list(checkpoints),
        steps_threshold=STEPS_THRESHOLD,
        methods=methods,
        test="two-sided permutation test of equal means (20,000 relabelings) and percentile bootstrap "
        "95% CI of the difference of means (20,000 resamples of seeds)",
    )


def committed_comparison(folder, ours: dict | None = None) -> dict | None:
    """The comparison with the reference curves committed in ``folder/summary.json`` (its ``reference`` block,
    :func:`compare_reference`'s output, saved by the runner while the reference file was present), for a page
    built where the file is not (offline and uncached). None if the summary has no such block.

    ``ours`` ({method: error curves [S, T]}, the seeds committed now): where a method has more or fewer seeds
    than when the block was saved, its final-error test is recomputed from the block's per-seed reference
    finals (exact: those are the reference's own final errors) and ``recomputed`` is set; the checkpoint and
    steps-to-10 % entries, which need the reference curves, are then dropped. ``source`` says in one sentence
    where the numbers came from."""
    import copy
    import json

    path = pathlib.Path(folder) / "summary.json"
    if not path.exists():
        return None
    block = json.loads(path.read_text()).get("reference")
    if not block or not block.get("methods"):
        return None
    out = copy.deepcopy(block)
    saved_n = {m: d["n_ours"] for m, d in out["methods"].items()}
    recomputed = []
    for m, curves in (ours or {}).items():
        d = out["methods"].get(m)
        if d is None or len(curves) == d["n_ours"]:
            continue
        final_o = 100 * np.asarray(curves, float)[:, -1]
        final_r = np.asarray(d["per_seed_final_ref"], float)
        d.update(
            n_ours=int(len(final_o)),
            final_ours=float(final_o.mean()),
            final_ours_se=stats.seed_se(final_o),
            per_seed_final_ours=final_o.tolist(),
            final_test=stats.two_sample_verdict(final_o, final_r, resolution()["final"]),
            solved_ours=float((final_o < 100 * SOLVED).mean()),
            recomputed=True,
        )
        for stale in ("checkpoints", "steps_ours", "steps_test"):
            d.pop(stale, None)
        recomputed.append(m)
    n_ref = sorted({d["n_ref"] for d in out["methods"].values()})
    saved = ", ".join(f"{m.upper()} {n}" for m, n in saved_n.items())
    out["source"] = (
        f"the reference's per-seed final errors ({'/'.join(map(str, n_ref))} seeds) and the comparison "
        f"saved in {path.parent.name}/summary.json when the reference file was present (our seeds then: "
        f"{saved})"
        + (
            f"; the final-error test recomputed for {', '.join(m.upper() for m in recomputed)} "
            "with the seeds committed now"
            if recomputed
            else ""
        )
    )
    out["recomputed"] = recomputed
    return out
