"""Table 3 at the paper's budget on an accelerator, as much as fits in a time budget (issue: evidence at the
paper's scale). Every configuration trains its 20 seeds as one program (vmapped, and sharded over all visible
devices); configurations run headline-first (P, H=10 TPO and GRPO, then H=7..9, then the interaction-matched
column) until ``--minutes`` is spent. Writes, atomically, per-run NPZs (the same files as
``python -m tpo_core reproduce table3 --budget paper``, so that command later resumes from them), a
summary.json and figure.html over the finished runs, and device.json with the device and its throughput.

Usage (on the GPU machine):  python benchmarks/gpu_table3.py --minutes 9 --out results/table3_paper
"""
import argparse
import json
import pathlib
import time

import jax

from tpo_core import runtime
from tpo_core.lab import atomic_io
from tpo_core.lab.reproduce import get, runner
from tpo_core.lab.reproduce.figure import preset_figure_html


def order(runs):
    def rank(r):
        lab = r.label
        return (lab["setting"] != "P", -lab["H"] if lab["H"] == 10 else lab["H"], r.method not in ("tpo", "grpo"))
    return sorted(runs, key=rank)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=9.0, help="stop starting new configurations after this")
    ap.add_argument("--out", default="results/table3_paper")
    ap.add_argument("--chunk", type=int, default=250)
    args = ap.parse_args()
    if not args.minutes > 0:
        raise SystemExit("error: minutes must be > 0")
    runtime.enable_compile_cache()
    out = pathlib.Path(args.out)
    preset = get("table3")
    runs, note = preset.runs("paper")
    t0 = time.perf_counter()
    done, curves, infos, rates = [], {}, {}, {}
    for run in order(runs):
        if time.perf_counter() - t0 > 60 * args.minutes:
            break
        cached = runner.load_run_file(out / run.filename, run.config_hash())
        if cached is None:
            (c,), info = runner.execute([run], run.seeds, chunk=args.chunk)
            runner.write_run_file(out / run.filename, run, c, info)
            cached = (c, info)
            rates[run.key] = len(run.seeds) * run.length / info["seconds"]
            print(f"{run.key}: {info['seconds']:.0f} s, {rates[run.key]:.0f} seed-episodes/s on "
                  f"{info['devices']} device(s)", flush=True)
        done.append(run)
        curves[run.key], infos[run.key] = cached
    summary = runner.summarize(preset, "paper", note + f"; {len(done)} of {len(runs)} configurations (time budget)",
                               done, curves, infos, command="python benchmarks/gpu_table3.py")
    atomic_io.write_json(out / "summary.json", summary)
    atomic_io.write_text(out / "figure.html", preset_figure_html(summary, done, curves))
    device = dict(devices=[str(d) for d in jax.devices()], kind=jax.devices()[0].device_kind,
                  wall_seconds=time.perf_counter() - t0, configurations=len(done),
                  seed_episodes_per_second=rates)
    atomic_io.write_json(out / "device.json", device)
    print(json.dumps(device, indent=1))


if __name__ == "__main__":
    main()
