"""Compile seconds and steady-state episodes/s for the Table-3 config (TPO, H=10, B=100, K=8, 4 epochs).

Usage: python benchmarks/bench_train.py [--episodes 20] [--seeds 1 8] [--method tpo]
Prints one line per seed count. Compile time = first chunk minus one steady chunk.
"""
import argparse
import time

import jax

from tpo_core.config import TokenConfig
from tpo_core.train import make_token_program


def measure(cfg: TokenConfig, n_seeds: int, episodes: int):
    program = make_token_program(cfg)
    seeds = list(range(n_seeds))
    t0 = time.perf_counter()
    carry = jax.block_until_ready(program.init(seeds))
    carry, m = program.chunk(carry, 0, episodes)
    jax.block_until_ready(m)
    first = time.perf_counter() - t0
    t1 = time.perf_counter()
    carry, m = program.chunk(carry, episodes, episodes)
    jax.block_until_ready(m)
    steady = time.perf_counter() - t1
    return first - steady, steady / episodes


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--method", default="tpo")
    ap.add_argument("--H", type=int, default=10)
    args = ap.parse_args()
    print(f"devices: {jax.devices()}")
    base = None
    for s in args.seeds:
        cfg = TokenConfig(method=args.method, H=args.H, episodes=args.episodes)
        compile_s, per_ep = measure(cfg, s, args.episodes)
        base = base or per_ep
        print(f"{args.method} H={args.H} B=100 K=8 seeds={s}: compile {compile_s:5.1f} s, "
              f"{per_ep:.3f} s/episode ({per_ep / s:.3f} s per seed-episode, {1 / per_ep:.2f} episodes/s, "
              f"{per_ep / base:.2f}x the 1-seed time)", flush=True)


if __name__ == "__main__":
    main()
