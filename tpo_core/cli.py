"""Command line: ``python -m tpo_core train ...`` (and the subcommands other modules register).

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

TASKS = ("reversal", "mnist")


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        raise UsageError(message)


def _positive_int(name):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}")
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {value}")
        return value
    return parse


def _add_train(sub):
    p = sub.add_parser("train", help="train one configuration over several seeds")
    p.add_argument("--task", default="reversal", help=f"one of {TASKS}")
    p.add_argument("--method", default="tpo")
    p.add_argument("--target", default="reverse_copy", help="copy | flip | reverse_copy | reverse_flip")
    p.add_argument("--reward", default="terminal", help="bag | sequential | terminal")
    p.add_argument("--H", type=int, default=10)
    p.add_argument("--V", type=int, default=2)
    p.add_argument("--B", type=int, default=100)
    p.add_argument("--K", type=int, default=8)
    p.add_argument("--episodes", type=int, default=None, help="episodes (reversal) or steps (mnist)")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--eta", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seeds", type=_positive_int("seeds"), default=1, help="number of seeds (0..n-1)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--interaction-matched", action="store_true",
                   help="single-sample methods get B·K prompts and lr·sqrt(K)")
    p.add_argument("--chunk", type=_positive_int("chunk"), default=None, help="episodes per streamed chunk")
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
    from . import config, mnist, results, train

    train.enable_compile_cache()
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    if args.out and pathlib.Path(args.out).suffix not in (".json", ".npz"):
        raise ValueError(f"out must end in .json or .npz, got {args.out!r}")
    if args.task == "reversal":
        cfg = config.TokenConfig(method=args.method, target=args.target, reward=args.reward, H=args.H, V=args.V,
                                 B=args.B, K=args.K, episodes=args.episodes or 300, epochs=args.epochs,
                                 eta=args.eta, lr=args.lr)
        if args.interaction_matched:
            cfg = cfg.interaction_matched()
        total, unit = cfg.episodes, "ep"
        chunk = args.chunk or max(1, min(50, cfg.episodes))
        bar = _progress(total, unit, args.quiet)
        t0 = time.perf_counter()
        metrics = train.train_tokens(cfg, seeds, chunk, (lambda d, m: bar.update(m["error"].shape[1])) if bar else None)
        curve = metrics["error"]
    elif args.task == "mnist":
        steps = args.episodes or 2000
        cfg = config.BanditConfig(method=args.method, steps=steps, eta=args.eta, lr=args.lr,
                                  eval_every=math.gcd(200, steps))
        dataset = mnist.load(args.data_dir)
        n_blocks = cfg.steps // cfg.eval_every
        bar = _progress(n_blocks, "eval", args.quiet)
        t0 = time.perf_counter()
        metrics = train.train_bandit(cfg, dataset, seeds, args.chunk or max(1, min(10, n_blocks)),
                                     (lambda d, m: bar.update(m["test_error"].shape[1])) if bar else None)
        curve = metrics["test_error"]
    else:
        raise ValueError(f"task must be one of {TASKS}, got {args.task!r}")
    if bar:
        bar.close()
    seconds = time.perf_counter() - t0
    final = curve[:, -1]
    se = final.std(ddof=1) / math.sqrt(len(final)) if len(final) > 1 else float("nan")
    metric = "greedy test error" if args.task == "mnist" else "error"
    print(f"{args.task} {cfg.method}: final {metric} {100 * final.mean():.2f}% ± {100 * se:.2f} (SE, "
          f"{len(seeds)} seeds) in {seconds:.1f} s")
    if args.out:
        meta = dict(task=args.task, config=dataclasses.asdict(cfg), seeds=seeds, seconds=seconds)
        if args.out.endswith(".npz"):
            results.write_npz(args.out, meta=np.array(str(meta)), **metrics)
        else:
            scalar = {k: v for k, v in metrics.items() if v.ndim == 2}
            results.write_json(args.out, dict(meta, metrics=scalar))
        print(f"wrote {args.out}")
    return 0


SUBCOMMANDS = [_add_train]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m tpo_core", description="Target Policy Optimization in JAX")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in SUBCOMMANDS:
        add(sub)
    try:  # the reproduction commands live in tpo_core.experiments (optional at import time)
        from . import experiments
        experiments.add_subcommands(sub)
    except ImportError:
        pass
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
