"""Table 3 at the paper's budget on an accelerator, as much as fits in a time budget (issue: evidence at the
paper's scale). Every configuration trains its 20 seeds as one program (vmapped, and sharded over all visible
devices); configurations run headline-first (P, H=10 TPO and GRPO, then H=7..9, then the interaction-matched
column) until ``--minutes`` is spent. Writes, atomically, per-run NPZs (the same files as
``python -m tpo_core reproduce table3 --budget paper``, so that command later resumes from them), a
summary.json and figure.html over the finished runs, and device.json with the device and its throughput; the
throughput also goes, with the command, the date, the commit and the host, to
``benchmarks/results/gpu_table3.json`` (``benchmarks.record``; ``benchmarks/report.py`` renders it).

Usage (on the GPU machine):  python -m benchmarks.gpu_table3 --minutes 9 --out results/table3_paper
"""

import argparse
import json
import pathlib
import sys
import time

import jax

from benchmarks import record
from tpo_core import runtime
from tpo_core.lab import atomic_io
from tpo_core.lab.reproduce import get, runner
from tpo_core.lab.reproduce.figure import preset_figure_html


def order(runs):
    def rank(r):
        lab = r.label
        return (lab["setting"] != "P", -lab["H"] if lab["H"] == 10 else lab["H"], r.method not in ("tpo", "grpo"))

    return sorted(runs, key=rank)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu_table3",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--minutes", type=float, default=9.0, help="stop starting new configurations after this")
    ap.add_argument("--out", default="results/table3_paper")
    ap.add_argument("--chunk", type=int, default=250)
    args = ap.parse_args(argv)
    if not args.minutes > 0:
        raise SystemExit("error: minutes must be > 0")
    runtime.enable_compile_cache()
    result = record.header(record.command_line("gpu_table3", argv, module=True))
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
            print(
                f"{run.key}: {info['seconds']:.0f} s, {rates[run.key]:.0f} seed-episodes/s on "
                f"{info['devices']} device(s)",
                flush=True,
            )
        done.append(run)
        curves[run.key], infos[run.key] = cached
    summary = runner.summarize(
        preset,
        "paper",
        note + f"; {len(done)} of {len(runs)} configurations (time budget)",
        done,
        curves,
        infos,
        command="python -m benchmarks.gpu_table3",
    )
    atomic_io.write_json(out / "summary.json", summary)
    atomic_io.write_text(out / "figure.html", preset_figure_html(summary, done, curves))
    device = dict(
        devices=[str(d) for d in jax.devices()],
        kind=jax.devices()[0].device_kind,
        wall_seconds=time.perf_counter() - t0,
        configurations=len(done),
        seed_episodes_per_second=rates,
    )
    atomic_io.write_json(out / "device.json", device)
    print(json.dumps(device, indent=1))
    result["machine"]["devices"] = device["devices"]
    result.update(
        kind=device["kind"],
        out=str(out),
        minutes=args.minutes,
        wall_seconds=device["wall_seconds"],
        configurations=len(done),
        of=len(runs),
        seed_episodes_per_second=rates,
    )
    print(f"wrote {record.write('gpu_table3', record.finish(result))}")


def rows(result: dict) -> list:
    """The figures of a results file as (what, measured) rows, for ``benchmarks/report.py``."""
    out = [
        ("device", f"{result['kind']} ({len(result['machine']['devices'])} device(s))"),
        (
            "configurations finished in the time budget",
            f"{result['configurations']} of {result['of']} in {result['wall_seconds']:.0f} s (--minutes "
            f"{result['minutes']:g})",
        ),
    ]
    out += [
        (f"{key}: seed-episodes per second", f"{rate:.0f}") for key, rate in result["seed_episodes_per_second"].items()
    ]
    return out


def summary(result: dict) -> list:
    """The README's row: the headline configuration's throughput on the accelerator."""
    rates = result["seed_episodes_per_second"]
    if not rates:
        return [("Table 3 at the paper's budget on a GPU", f"0 configurations trained on {result['kind']}")]
    key, rate = next(iter(rates.items()))
    return [(f"Table 3 at the paper's budget on {result['kind']}: {key}", f"{rate:.0f} seed-episodes / s")]


if __name__ == "__main__":
    main()
