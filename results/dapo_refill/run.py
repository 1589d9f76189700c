"""TPO vs TPO + dynamic-sampling refill at the ``dapo`` preset's setting (issue 29; review defect 16).

    PYTHONPATH=. python results/dapo_refill/run.py [--budget cpu] [--seeds 8]   # trains what is missing
    PYTHONPATH=. python results/dapo_refill/run.py --summary                    # summary.json from what is on disk

One file per (arm, seed) under ``<arm>.seeds/seed_<s>.npz`` (the runner's per-seed format, keyed by the
configuration, the seed and the engine version), written when the seed finishes: a killed run resumes at its
next unfinished seed. Seeds run seed-major (TPO seed s, refill seed s, then s + 1), so a partial run has both
arms at equal seeds.

Comparisons (final error = mean exact-match error of the sampled completions over the last ``WINDOW`` of the
prompt-matched horizon):
* prompt-matched: both arms at the same episode T (same number of updates, each on B groups; refill samples
  r·B·K completions an episode, TPO B·K);
* rollout-matched: refill at episode T/r against TPO at episode T (the same number of sampled completions).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

from tpo_core import methods
from tpo_core.lab.reproduce import runner, seedwise
from tpo_core.lab.reproduce.presets import dapo_refill_runs

OUT = pathlib.Path(__file__).resolve().parent
WINDOW = 0.1  # share of the horizon averaged for a "final" error


def train(budget: str, n_seeds: int) -> None:
    runs, note = dapo_refill_runs(budget, n_seeds)
    for s in range(n_seeds):
        for r in runs:
            path = runner.seed_file(OUT, r, s)
            if runner.load_run_file(path, r.seed_hash(s)) is not None:
                continue
            (curves,), info = runner.execute([r], (s,))
            path.parent.mkdir(parents=True, exist_ok=True)
            runner.write_run_file(path, r, curves, info, seeds=(s,))
            print(f"{r.key} seed {s}: {info['seconds']:.0f} s, final-window error "
                  f"{100 * curves['error'][0, -max(1, int(WINDOW * r.length)):].mean():.2f} %", flush=True)


def _window_mean(err, end):
    w = max(1, int(round(WINDOW * end)))
    return 100 * np.asarray(err[:, end - w:end], np.float64).mean(1)   # float64: float32 rounding splits true ties


def summary(budget: str, n_seeds: int) -> dict:
    runs, note = dapo_refill_runs(budget, n_seeds)
    got = {}
    for r in runs:
        seeds, curves = [], []
        for s in r.seeds:
            g = runner.load_run_file(runner.seed_file(OUT, r, s), r.seed_hash(s))
            if g is not None:
                seeds.append(s)
                curves.append(g[0])
        got[r.key] = (seeds, curves)
    common = sorted(set(got["tpo"][0]) & set(got["tpo_refill"][0]))
    pick = lambda key, m: np.concatenate([c[m] for s, c in zip(*got[key]) if s in common])
    tpo, ref = pick("tpo", "error"), pick("tpo_refill", "error")
    T = tpo.shape[1]
    r = methods.get("tpo_refill").oversample
    Tr = int(round(T / r))
    B, K = runs[0].cfg.B, runs[0].cfg.K
    out = dict(setting=note, seeds=common, oversample=r, window=WINDOW, episodes=T,
               rollouts_per_episode=dict(tpo=B * K, tpo_refill=methods.get("tpo_refill").groups_drawn(B) * K),
               fill_frac=dict(mean=float(pick("tpo_refill", "fill_frac").mean()),
                              first_tenth=float(pick("tpo_refill", "fill_frac")[:, :T // 10].mean()),
                              last_tenth=float(pick("tpo_refill", "fill_frac")[:, -(T // 10):].mean())),
               zero_var_frac_tpo=float(pick("tpo", "zero_var_frac").mean()))
    comps = {}
    for name, a, b in (("prompt_matched", _window_mean(tpo, T), _window_mean(ref, T)),
                       ("rollout_matched", _window_mean(tpo, T), _window_mean(ref, Tr))):
        comps[name] = dict(tpo=a.tolist(), tpo_refill=b.tolist(), tpo_mean=float(a.mean()),
                           tpo_refill_mean=float(b.mean()),
                           mann_whitney_p=float(seedwise.mann_whitney(b, a)["p"]) if len(common) > 1 else None,
                           refill_episode=T if name == "prompt_matched" else Tr, tpo_episode=T)
    out.update(comps)
    # mean error over the whole run (area under the curve), per sampled completion budget
    out["auc_prompt_matched"] = dict(tpo=(100 * tpo.mean(1)).tolist(), tpo_refill=(100 * ref.mean(1)).tolist())
    # speed and stability, on the 10-episode moving mean of the error
    smooth = lambda e: np.stack([np.convolve(x, np.ones(10) / 10, "valid") for x in e])  # [S, T - 9], ends at t + 9
    def first_below(e, level):
        return [int(np.argmax(x < level)) + 9 if (x < level).any() else None for x in smooth(e)]
    def relapsed(e):  # reached < 1 % and later went back above 20 %
        out = []
        for x in smooth(e):
            hit = np.flatnonzero(x < 0.01)
            out.append(bool(len(hit) and (x[hit[0]:] > 0.2).any()))
        return out
    per_ep = out["rollouts_per_episode"]
    out["first_episode_below_5pct"] = dict(tpo=first_below(tpo, 0.05), tpo_refill=first_below(ref, 0.05))
    out["rollouts_to_below_5pct"] = {k: [None if e is None else (e + 1) * per_ep[k] for e in v]
                                    for k, v in out["first_episode_below_5pct"].items()}
    out["relapsed_after_1pct"] = dict(tpo=relapsed(tpo), tpo_refill=relapsed(ref))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", default="cpu")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--summary", action="store_true")
    a = ap.parse_args()
    if not a.summary:
        train(a.budget, a.seeds)
    s = summary(a.budget, a.seeds)
    (OUT / f"summary_{a.budget}.json").write_text(json.dumps(s, indent=1) + "\n")
    print(json.dumps({k: s[k] for k in ("seeds", "fill_frac", "prompt_matched", "rollout_matched",
                                        "first_episode_below_5pct", "relapsed_after_1pct")}))
    sys.exit(0)
