"""Command line: ``python -m tpo_core train | reproduce | report ...``.

Bad input exits with status 2 and one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import pathlib
import sys
import time

import numpy as np

from tpo_core import checks, config, runtime, stream, train

from . import atomic_io, mnist, report
from .reproduce import experiments, stats

TASKS = tuple(f.cli for f in stream.FAMILIES.values())


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        raise UsageError(message)

    def parse_known_args(self, args=None, namespace=None):
        ns, rest = super().parse_known_args(args, namespace)
        for action in self._actions:  # `--seeds=--` reaches an option as [] without calling its type
            value = getattr(ns, action.dest, None)
            if action.nargs is None and action.type is not None and isinstance(value, list):
                raise UsageError(f"argument {'/'.join(action.option_strings)}: expected one value")
        return ns, rest


def _int_at_least(name, lo):
    """An argparse type: the text as an integer >= ``lo``, by the library's check (:func:`tpo_core.checks.integer`)."""

    def parse(text):
        try:
            return checks.integer(name, int(text), lo)
        except ValueError as e:
            message = str(e) if str(e).startswith(name) else f"{name} must be an integer, got {text!r}"
            raise argparse.ArgumentTypeError(message) from None

    return parse


def _positive_int(name):
    return _int_at_least(name, 1)


def parse_sweep(items) -> dict | None:
    """``["eta=0.25,0.5,1", "lr=..."]`` -> ``{"eta": [0.25, 0.5, 1.0], ...}`` (values zipped across knobs)."""
    if not items:
        return None
    sweep = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not name or not values:
            raise ValueError(f"sweep must look like knob=v1,v2,..., got {item!r}")
        try:
            sweep[name.strip()] = [float(v) for v in values.split(",")]
        except ValueError:
            raise ValueError(f"sweep {name.strip()} values must be numbers, got {values!r}") from None
    return sweep


def _add_train(sub):
    p = sub.add_parser("train", help="train one configuration over several seeds")
    p.add_argument("--task", default=stream.TOKEN.cli, help=f"one of {TASKS}")
    p.add_argument("--method", default="tpo")
    p.add_argument("--target", default="reverse_copy", help="copy | flip | reverse_copy | reverse_flip")
    p.add_argument("--reward", default="terminal", help="bag | sequential | terminal")
    p.add_argument("--H", type=int, default=10)
    p.add_argument("--V", type=int, default=2)
    p.add_argument("--B", type=int, default=100)
    p.add_argument("--K", type=int, default=8)
    p.add_argument(
        "--episodes", type=int, default=None, help="episodes (reversal, default 300) or steps (mnist, default 2000)"
    )
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--eta", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seeds", type=_positive_int("seeds"), default=1, help="number of seeds (0..n-1)")
    p.add_argument("--first-seed", type=_int_at_least("first-seed", 0), default=0)
    p.add_argument(
        "--sweep",
        action="append",
        default=None,
        metavar="KNOB=V1,V2,...",
        help="train every value in one compiled program (eta, lr, beta, clip_eps, std_floor, "
        "reward_noise; repeat to zip several knobs)",
    )
    p.add_argument(
        "--interaction-matched", action="store_true", help="single-sample methods get B·K prompts and lr·sqrt(K)"
    )
    p.add_argument("--chunk", type=_positive_int("chunk"), default=None, help="episodes per streamed chunk")
    p.add_argument(
        "--run-batch",
        type=_positive_int("run-batch"),
        default=None,
        help="runs (seeds x sweep values) vmapped together, the batches one after another in the same "
        "program (default: all at once; on a CPU that one run already fills, 1 or 2 avoids "
        "batching every product over the runs)",
    )
    p.add_argument("--data-dir", default=None, help="MNIST IDX folder (else $TPO_DATA_DIR, cache, download)")
    p.add_argument("--out", default=None, help="results file: .json or .npz (written atomically)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_train)


def _progress(total: int, unit: str, quiet: bool):
    if quiet:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit=unit, dynamic_ncols=True, file=sys.stderr)


def cmd_train(args) -> int:
    runtime.enable_compile_cache()
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    if args.out and pathlib.Path(args.out).suffix not in (".json", ".npz"):
        raise ValueError(f"out must end in .json or .npz, got {args.out!r}")
    sweep = parse_sweep(args.sweep)
    checks.require(args.task in TASKS, "task", f"must be one of {TASKS}", args.task)
    task = stream.family(args.task)
    if task.is_token:
        cfg = config.TokenConfig(
            method=args.method,
            target=args.target,
            reward=args.reward,
            H=args.H,
            V=args.V,
            B=args.B,
            K=args.K,
            episodes=300 if args.episodes is None else args.episodes,
            epochs=args.epochs,
            eta=args.eta,
            lr=args.lr,
        )
        if args.interaction_matched:
            cfg = cfg.interaction_matched()
        total, unit, curve_name, metric = cfg.episodes, "ep", "error", "error"
        chunk = args.chunk if args.chunk is not None else max(1, min(50, cfg.episodes))
        run = lambda cb: train.train_tokens(cfg, seeds, chunk, cb, sweep=sweep, run_batch=args.run_batch)  # noqa: E731
    else:
        steps = 2000 if args.episodes is None else args.episodes
        if steps < 1:
            raise ValueError(f"episodes (mnist steps) must be >= 1, got {steps}")
        cfg = config.BanditConfig(
            method=args.method, steps=steps, eta=args.eta, lr=args.lr, eval_every=math.gcd(200, steps)
        )
        dataset = mnist.load(args.data_dir)
        total, unit, curve_name, metric = cfg.steps // cfg.eval_every, "eval", "test_error", "greedy test error"
        chunk = args.chunk if args.chunk is not None else max(1, min(10, total))
        run = lambda cb: train.train_bandit(  # noqa: E731
            cfg, dataset, seeds, chunk_size=chunk, callback=cb, sweep=sweep, run_batch=args.run_batch
        )
    config.check_sweep(cfg, sweep)
    points = len(next(iter(sweep.values()))) if sweep else 1
    if task.is_token:  # refused before the progress bar starts (train_tokens checks it again, cheaply)
        train.check_run_memory(cfg, len(seeds), points, args.run_batch)
    bar = _progress(total, unit, args.quiet)
    t0 = time.perf_counter()
    metrics = run((lambda d, m: bar.update(m[curve_name].shape[1])) if bar else None)
    if bar:
        bar.close()
    seconds = time.perf_counter() - t0
    curves = metrics[curve_name] if sweep else metrics[curve_name][None]
    for i in range(points):
        final = 100 * curves[i][:, -1]
        where = ", ".join(f"{k}={v[i]:g}" for k, v in sweep.items()) + ": " if sweep else ""
        spread = f"± {stats.seed_se(final):.2f} (SE, {len(seeds)} seeds)" if len(seeds) > 1 else "(1 seed, no SE)"
        print(f"{args.task} {cfg.method}: {where}final {metric} {final.mean():.2f}% {spread} in {seconds:.1f} s")
    if args.out:
        meta = dict(task=args.task, config=dataclasses.asdict(cfg), seeds=seeds, seconds=seconds, sweep=sweep)
        if args.out.endswith(".npz"):
            atomic_io.write_npz(args.out, meta=np.array(str(meta)), **metrics)
        else:
            scalar = {k: v for k, v in metrics.items() if v.ndim == (3 if sweep else 2)}
            atomic_io.write_json(args.out, dict(meta, metrics=scalar))
        print(f"wrote {args.out}")
    return 0


def _add_reproduce(sub):
    p = sub.add_parser(
        "reproduce",
        help="train an experiment of the registry: a table or ablation of the paper "
        "(JAX) or an LLM experiment (PyTorch + TRL)",
    )
    p.add_argument("name", nargs="?", help="experiment name (see --list)")
    p.add_argument("--list", action="store_true", help="list the experiments and their budgets, and exit")
    p.add_argument("--budget", default="cpu", help="one of the experiment's budgets (see --list)")
    p.add_argument("--seeds", type=_positive_int("seeds"), default=None, help="number of seeds (default: the budget's)")
    p.add_argument("--out", default=None, help="results folder (default results/<name>)")
    p.add_argument("--chunk", type=_positive_int("chunk"), default=None, help="episodes per streamed chunk (JAX)")
    p.add_argument(
        "--only",
        default=None,
        metavar="RUN[,RUN]",
        help="train only these runs (a JAX preset's runs, e.g. tpo_H_10_P; an LLM experiment's methods), "
        "so several processes can share one --out; the summary is written by whichever finishes "
        "the last run",
    )
    p.add_argument(
        "--partial",
        action="store_true",
        help="train nothing: write the summary of the seeds finished so far (a run in progress)",
    )
    p.add_argument(
        "--distributed",
        action="store_true",
        help="call jax.distributed.initialize() first (JAX; several hosts, one process each)",
    )
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_reproduce)


def cmd_reproduce(args) -> int:
    """Every experiment, JAX or LLM, through the registry: the flags given are passed on, and an experiment
    refuses one that does not apply to it (one line, exit 2)."""
    if args.list:
        print(experiments.list_text())
        return 0
    if not args.name:
        raise ValueError("name is required (or --list); choose from " + ", ".join(experiments.names()))
    experiment = experiments.get(args.name)
    out = args.out or str(experiment.default_out(args.budget))
    command = (
        f"python -m tpo_core reproduce {args.name} --budget {args.budget}"
        + (f" --seeds {args.seeds}" if args.seeds else "")
        + f" --out {out}"
    )
    only = None if args.only is None else [k.strip() for k in args.only.split(",") if k.strip()]
    summary = experiment.train(
        args.budget,
        out,
        seeds=args.seeds,
        only=only,
        partial=args.partial,
        progress=not args.quiet,
        command=command,
        chunk=args.chunk,
        distributed=args.distributed,
    )
    if summary is None:
        if only is not None:
            print(f"trained {', '.join(only)}; {out}/summary.json is written once every run of the preset is done")
        return 0
    print(report.to_markdown([summary]))
    print(f"wrote {out}/summary.json, {out}/figure.html and {len(summary['rows'])} rows")
    return 0


def _add_report(sub):
    p = sub.add_parser("report", help="render reproduction summaries as one markdown/HTML table")
    p.add_argument("directory", help="folder holding summary.json files (searched recursively)")
    p.add_argument("--out", default=None, help="REPORT.md or REPORT.html (default: print markdown)")
    p.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    if args.out is not None and pathlib.Path(args.out).suffix not in (".md", ".html"):
        raise ValueError(f"out must end in .md or .html, got {args.out!r}")
    summaries = report.load_summaries(args.directory)
    if args.out is None:
        print(report.to_markdown(summaries))
        return 0
    command = f"python -m tpo_core report {args.directory} --out {args.out}"
    text = report.to_html(summaries) if args.out.endswith(".html") else report.to_markdown(summaries, command=command)
    atomic_io.write_text(args.out, text)
    print(f"wrote {args.out} ({len(summaries)} summaries)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m tpo_core", description="Target Policy Optimization in JAX")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_add_train, _add_reproduce, _add_report):
        add(sub)
    return parser


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except (UsageError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
