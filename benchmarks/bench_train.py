"""Training speed of the Table-3 config (TPO, H=10, V=2, B=100, K=8, 4 epochs, Muon + AdamW): compile time,
steady-state seconds per episode for 1 and 8 vmapped seeds, a 5-value η sweep × 2 seeds as one program, and a
profile of where one episode's time goes (sampling, the training forward/backward, the optimizer).

Usage: python benchmarks/bench_train.py [--episodes 20] [--seeds 1 8] [--method tpo] [--no-profile]
Compile time = first chunk minus one steady chunk. Every timing blocks on its outputs.
"""
import argparse
import time

import jax
import jax.numpy as jnp
import optax

from tpo_core.config import TokenConfig
from tpo_core.train import make_token_program

ETAS = [0.25, 0.5, 1.0, 2.0, 4.0]


def measure(cfg: TokenConfig, seeds, episodes: int, points=None):
    program = make_token_program(cfg)
    t0 = time.perf_counter()
    carry = jax.block_until_ready(program.init(seeds, points))
    carry, m = program.chunk(carry, 0, episodes)
    jax.block_until_ready(m)
    first = time.perf_counter() - t0
    t1 = time.perf_counter()
    carry, m = program.chunk(carry, episodes, episodes)
    jax.block_until_ready(m)
    steady = time.perf_counter() - t1
    return first - steady, steady / episodes


def _best(fn, *args, repeat=5):
    jax.block_until_ready(fn(*args))  # compile
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return min(times)


def profile(cfg: TokenConfig):
    """Time the pieces of one episode separately, each jitted alone at the same shapes."""
    program = make_token_program(cfg)
    parts = program.chunk.parts
    knobs = {k: jnp.float32(v) for k, v in cfg.knobs.items()}
    hp = {k: knobs[k] for k in ("eta", "beta", "clip_eps", "std_floor")}
    state = jax.jit(parts["init_one"])(jax.random.key(0), knobs)
    params, opt, key = state["params"], state["opt"], state["key"]
    rollout = jax.jit(lambda p, k: parts["rollout"](p, k, 0, knobs))
    batch, _ = rollout(params, key)
    grad = jax.jit(lambda p, b: jax.value_and_grad(parts["loss_fn"], has_aux=True)(p, b, hp))
    (_, _), g = grad(params, batch)
    update = jax.jit(lambda g, o, p: optax.apply_updates(p, parts["tx"].update(g, o, p)[0]))
    episode = jax.jit(lambda st: parts["episode"](st, 0))
    t_roll = _best(rollout, params, key)
    t_grad = _best(grad, params, batch)
    t_opt = _best(update, g, opt, params)
    t_ep = _best(episode, state)
    E = cfg.n_epochs
    print(f"profile (one seed, best of 5): episode {t_ep:.3f} s = sampling {t_roll:.3f} s "
          f"+ {E} x (forward/backward {t_grad:.3f} s + optimizer {t_opt:.4f} s) "
          f"[sum {t_roll + E * (t_grad + t_opt):.3f} s; the rest is metrics and fusion effects]", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--method", default="tpo")
    ap.add_argument("--H", type=int, default=10)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--no-sweep", action="store_true")
    args = ap.parse_args()
    print(f"devices: {jax.devices()}")
    cfg = TokenConfig(method=args.method, H=args.H, episodes=args.episodes, track=2)
    base = None
    for s in args.seeds:
        compile_s, per_ep = measure(cfg, list(range(s)), args.episodes)
        base = base or per_ep
        print(f"{args.method} H={args.H} B=100 K=8 seeds={s}: compile {compile_s:5.1f} s, "
              f"{per_ep:.3f} s/episode ({per_ep / s:.3f} s per seed-episode, {1 / per_ep:.2f} episodes/s, "
              f"{per_ep / base:.2f}x the 1-seed time)", flush=True)
    if not args.no_sweep:
        compile_s, per_ep = measure(cfg, [0, 1], args.episodes, [{"eta": e} for e in ETAS])
        print(f"eta sweep {ETAS} x 2 seeds (one program, 10 runs): compile {compile_s:5.1f} s, {per_ep:.3f} s/episode "
              f"= {per_ep / base:.2f}x one run", flush=True)
    if not args.no_profile:
        profile(cfg)


if __name__ == "__main__":
    main()
