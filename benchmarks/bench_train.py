"""Training speed of the Table-3 config (TPO, H=10, V=2, B=100, K=8, 4 epochs, Muon + AdamW): compile time,
steady-state seconds per episode for 1 and 8 vmapped seeds, a 5-value η sweep × 2 seeds as one program, and a
profile of where one episode's time goes (sampling, the training forward/backward, the optimizer).

Usage: python -m benchmarks.bench_train [--episodes 20] [--seeds 1 8] [--run-batch 1 2] [--method tpo] [--no-profile]
       [--no-sweep] [--ops] [--compile [--compare default tpo_core level1]] [--startup] [--out FILE]
Prints the figures and writes them, with the command, the date, the commit and the host (its cores, load average and
a 2048² matrix-product probe, ``record.matmul_gflops``), to ``benchmarks/results/bench_train.json`` (atomically;
``benchmarks/report.py`` renders it).
Compile time = first chunk minus one steady chunk (the init program included). Every timing blocks on its outputs.
``--ops`` also traces one steady chunk of the fused program (XLA's own per-kernel timings, through
``jax.profiler``) and sums kernel time by phase of the episode (the named scopes of ``tpo_core.train``) and by
kind of kernel (matrix products, layout copies, other fusions).
``--compile`` splits one cold compile of the 1-seed program into its stages (the init program, tracing,
lowering, and XLA's own stages from the profiler: HLO passes, LLVM code generation of the fused kernels,
thunk emission), then compiles the same lowered program with each of the ``--compare`` settings (``default``:
XLA's CPU defaults; ``tpo_core``: what ``tpo_core`` uses on the CPU, ``runtime.CHUNK_COMPILER_OPTIONS``, XLA's
fast-compile preset; ``level1``: LLVM at level 1 instead of 3; every option a setting does not name at XLA's CPU
default, whatever XLA_FLAGS says) and times their steady chunks interleaved.
``--startup`` times the compile of the 1-seed run in two fresh processes that share an empty persistent compile
cache (``runtime.enable_compile_cache``, as the CLI, the demo and the book turn it on): the first compiles and
writes the cache, the second loads the programs from it, which is what a later start at the same shape sees.
"""

import argparse
import collections
import glob
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import optax

from benchmarks import record
from tpo_core import runtime
from tpo_core.config import TokenConfig
from tpo_core.train import make_token_program, token_parts

ETAS = [0.25, 0.5, 1.0, 2.0, 4.0]


def measure(cfg: TokenConfig, seeds, episodes: int, points=None, run_batch=None):
    program = make_token_program(cfg, run_batch)
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


def profile(cfg: TokenConfig) -> dict:
    """Time the pieces of one episode separately, each jitted alone at the same shapes (seconds, best of 5)."""
    parts = token_parts(cfg)
    knobs = {k: jnp.float32(v) for k, v in cfg.knobs.items()}
    state = jax.jit(parts["init_one"])(jax.random.key(0), knobs)
    params, opt, key = state["params"], state["opt"], state["key"]
    rollout = jax.jit(lambda p, k: parts["rollout"](p, k, 0, knobs))
    batch, _ = rollout(params, key)
    grad = jax.jit(lambda p, b: jax.value_and_grad(parts["loss_fn"], has_aux=True)(p, b, knobs))
    (_, _), g = grad(params, batch)
    update = jax.jit(lambda g, o, p: optax.apply_updates(p, parts["tx"].update(g, o, p)[0]))
    episode = jax.jit(lambda st: parts["episode"](st, 0))
    t_roll = _best(rollout, params, key)
    t_grad = _best(grad, params, batch)
    t_opt = _best(update, g, opt, params)
    t_ep = _best(episode, state)
    E = cfg.n_epochs
    print(
        f"profile (one seed, best of 5): episode {t_ep:.3f} s = sampling {t_roll:.3f} s "
        f"+ {E} x (forward/backward {t_grad:.3f} s + optimizer {t_opt:.4f} s) "
        f"[sum {t_roll + E * (t_grad + t_opt):.3f} s; the rest is metrics and fusion effects]",
        flush=True,
    )
    return {"episode_s": t_ep, "sampling_s": t_roll, "forward_backward_s": t_grad, "optimizer_s": t_opt, "epochs": E}


PHASES = ("sampling", "forward_backward", "optimizer", "metrics")


def kernel_kind(name: str) -> str:
    if name.startswith(("ynn_fusion", "xnn_fusion", "dot", "onednn")):
        return "matrix products"
    if "copy" in name or "transpose" in name:
        return "layout copies / transposes"
    return "other fusions (elementwise, reductions, gathers)"


def _phase(op_name: str) -> str:
    return next((p for p in PHASES if f"/{p}/" in op_name + "/"), "unlabelled")


def phases_of_instructions(hlo: str) -> dict:
    """Instruction name -> phase, from the op_name metadata of the optimized HLO. XLA drops the metadata of
    some instructions (library fusions, copies); such an instruction takes the phase of its fused computation,
    else the most common phase of its operands, else that of the labelled instruction before it."""
    own, calls, operands, order, inside, comp = {}, {}, {}, [], collections.defaultdict(collections.Counter), None
    for line in hlo.splitlines():
        head = re.match(r"(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if head and not line.startswith(" "):
            comp = head.group(1)
            continue
        got = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = [^(]*\(([^)]*)\)", line)
        if not got:
            continue
        name = got.group(1)
        order.append(name)
        operands[name] = re.findall(r"%([\w.\-]+)", got.group(2))
        op = re.search(r'op_name="([^"]*)"', line)
        if op:
            own[name] = _phase(op.group(1))
            inside[comp][own[name]] += 1
        target = re.search(r"calls=%?([\w.\-]+)", line)
        if target:
            calls[name] = target.group(1)
    phases = dict(own)
    for name, target in calls.items():
        if name not in phases and inside[target]:
            phases[name] = inside[target].most_common(1)[0][0]
    for _ in range(4):  # operands first (a few passes reach chains of unlabelled copies)
        for name in order:
            if name not in phases:
                votes = collections.Counter(phases[o] for o in operands[name] if o in phases)
                if votes:
                    phases[name] = votes.most_common(1)[0][0]
    last = "unlabelled"
    for name in order:
        last = phases.setdefault(name, last)
    return phases


def _trace_events(directory: str, suffix: str) -> list:
    """The events of the profiler trace file ending in ``suffix`` that ``jax.profiler.trace`` wrote under
    ``directory``."""
    path = glob.glob(os.path.join(directory, "**", f"*{suffix}"), recursive=True)[0]
    trace = json.load(gzip.open(path))
    return trace["traceEvents"] if isinstance(trace, dict) else trace


def op_profile(cfg: TokenConfig, episodes: int = 2) -> dict:
    """Per-kernel times of the fused episode, from one traced steady chunk (one seed): kernel seconds per episode
    by phase and by kind of kernel. The chunk is short: the profiler's event buffer drops kernels of longer traces."""
    program = make_token_program(cfg)
    carry = program.init([0])
    carry, m = program.chunk(carry, 0, episodes)
    jax.block_until_ready(m)
    hlo = program.chunk.lower(carry, episodes, episodes).compile().as_text()
    phase_of = phases_of_instructions(hlo)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        with jax.profiler.trace(d, create_perfetto_trace=True):
            carry, m = program.chunk(carry, episodes, episodes)
            jax.block_until_ready(m)
        wall = time.perf_counter() - t0
        events = _trace_events(d, "perfetto_trace.json.gz")
    by_phase, by_kind = collections.Counter(), collections.Counter()
    for e in events:
        name = e.get("name", "")
        if e.get("ph") != "X" or name not in phase_of or name.startswith(("while", "conditional", "call")):
            continue
        by_phase[phase_of[name]] += e["dur"] / 1e6 / episodes
        by_kind[kernel_kind(name)] += e["dur"] / 1e6 / episodes
    total = sum(by_kind.values())
    print(
        f"kernels of the fused episode (one seed, traced, {wall / episodes:.3f} s/episode wall under the tracer): "
        f"{total:.3f} s of kernel time per episode summed over threads",
        flush=True,
    )
    for title, table in (("by phase", by_phase), ("by kind", by_kind)):
        print(f"  {title}: " + "; ".join(f"{k} {v:.3f} s ({100 * v / total:.0f} %)" for k, v in table.most_common()))
    return {
        "episodes_traced": episodes,
        "wall_s_per_episode": wall / episodes,
        "kernel_s_per_episode": total,
        "by_phase_s": dict(by_phase.most_common()),
        "by_kind_s": dict(by_kind.most_common()),
    }


# XLA's compile stages, as the profiler names them (jaxlib 0.10.2); a name missing from the trace prints "n/a".
COMPILE_STAGES = (
    ("HLO passes before layout assignment", "HLO passes through layout assignment (jit_chunk)"),
    ("HLO passes after layout assignment", "HLO passes after layout assignment (jit_chunk)"),
    ("LLVM code generation of the fused kernels", "Codegen"),
    ("thunk emission", "ThunkEmitter::EmitEntryComputation"),
    ("XLA's whole compile", "PjRtCpuClient::Compile"),
)


# Compile settings --compile compares: XLA's CPU defaults but for what each names, whatever XLA_FLAGS says (the test
# suite sets faster ones).
_XLA_DEFAULTS = {
    "xla_backend_optimization_level": 3,
    "xla_cpu_opt_preset": "CPU_OPT_PRESET_DEFAULT",
    "xla_cpu_use_fusion_emitters": True,
}
COMPILE_SETTINGS = {
    "default": {},
    "tpo_core": runtime.CHUNK_COMPILER_OPTIONS,
    "level1": {"xla_backend_optimization_level": 1},
}


def _xla_options(setting: str) -> dict:
    return {**_XLA_DEFAULTS, **COMPILE_SETTINGS[setting]}


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def compile_profile(cfg: TokenConfig, settings=("default", "tpo_core"), episodes: int = 5, rounds: int = 6) -> dict:
    """Where one cold compile goes, and what the compile settings trade (see the module docstring). Returns
    ``{"init_s", "trace_s", "lower_s", "stages_s": {title: s or None}, "llvm_kernels", "settings": {setting:
    {"compile_s", "episode_best_s", "episode_median_s", "max_metric_difference"}}}``."""
    runtime.release_compiled(force=True)  # cold: forget the programs the timings above compiled
    cache_was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)  # and never read a persistent cache
    try:
        return _compile_profile(cfg, settings, episodes, rounds)
    finally:
        jax.config.update("jax_enable_compilation_cache", cache_was)


def _compile_profile(cfg, settings, episodes, rounds):
    program = make_token_program(cfg)
    carry, t_init = _timed(lambda: jax.block_until_ready(program.init([0])))
    traced, t_trace = _timed(lambda: program.chunk.trace(carry, 0, episodes))
    lowered, t_lower = _timed(traced.lower)
    first = settings[0]
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            compiled, t_compile = _timed(lambda: lowered.compile(_xla_options(first)))
        events = _trace_events(d, ".trace.json.gz")
    spans, counts = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("ph") == "X":
            spans[e["name"]] += e["dur"] / 1e6
            counts[e["name"]] += 1
    print(
        f"cold compile of the 1-seed program: init program (compile + run) {t_init:.2f} s, trace {t_trace:.2f} s, "
        f"lower {t_lower:.2f} s, compile with setting {first} {t_compile:.2f} s; "
        f"inside XLA's compile:",
        flush=True,
    )
    for title, name in COMPILE_STAGES:
        print(
            f"  {title}: " + (f"{spans[name]:.2f} s" if name in spans else "n/a (no such span in the trace)"),
            flush=True,
        )
    print(f"  fused kernels compiled by LLVM: {counts.get('FusionCompiler::Compile', 'n/a')}", flush=True)
    out = {
        "init_s": t_init,
        "trace_s": t_trace,
        "lower_s": t_lower,
        "stages_s": {title: spans.get(name) for title, name in COMPILE_STAGES},
        "llvm_kernels": counts.get("FusionCompiler::Compile"),
        "episodes": episodes,
        "rounds": rounds,
        "settings": {first: {"compile_s": t_compile}},
    }
    programs = {first: compiled}
    print(f"  setting {first}: compile {t_compile:.2f} s", flush=True)
    for setting in settings[1:]:
        programs[setting], t = _timed(lambda setting=setting: lowered.compile(_xla_options(setting)))
        out["settings"][setting] = {"compile_s": t}
        print(f"  setting {setting}: compile {t:.2f} s", flush=True)
    times, metrics = collections.defaultdict(list), {}
    for _ in range(rounds):  # interleaved, so every setting sees the same moments of a noisy host
        for setting, c in programs.items():
            (_, metrics[setting]), t = _timed(lambda c=c: jax.block_until_ready(c(carry, 0)))
            times[setting].append(t / episodes)
    for setting, v in times.items():
        v = sorted(v)
        diff = max(
            float(jnp.max(jnp.abs(jnp.asarray(a, jnp.float32) - jnp.asarray(b, jnp.float32))))
            for a, b in zip(jax.tree.leaves(metrics[first]), jax.tree.leaves(metrics[setting]))
        )
        print(
            f"  setting {setting}: {v[0]:.3f} s/episode best, {v[len(v) // 2]:.3f} median of {rounds} chunks of "
            f"{episodes}; largest metric difference from setting {first}: {diff:.2g}",
            flush=True,
        )
        out["settings"][setting].update(
            episode_best_s=v[0], episode_median_s=v[len(v) // 2], max_metric_difference=diff
        )
    return out


def startup_profile(fields: dict, episodes: int) -> list:
    """[cold, from the cache]: each {"compile": s, "episode": s, "cache_files": n} of a 1-seed run of
    ``TokenConfig(**fields)`` in a fresh process, both processes sharing one new persistent compile cache."""
    runs = []
    with tempfile.TemporaryDirectory() as cache:
        for _ in range(2):
            child = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.bench_train",
                    "--startup-child",
                    json.dumps(dict(fields, episodes=episodes)),
                ],
                cwd=record.ROOT,
                env=dict(os.environ, TPO_JAX_CACHE=cache),
                capture_output=True,
                text=True,
            )
            if child.returncode:
                raise RuntimeError(f"the --startup process failed:\n{child.stderr[-2000:]}")
            run = json.loads(child.stdout.strip().splitlines()[-1])
            run["cache_files"] = sum(len(f) for _, _, f in os.walk(cache))
            runs.append(run)
    return runs


def _startup_child(fields: str):
    runtime.enable_compile_cache()  # $TPO_JAX_CACHE, set by startup_profile
    # every program into the cache, however fast it compiled (the product's threshold is 0.5 s, which every program
    # of the Table-3 run passes; a small config's init program may not, and would then compile in both processes)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    cfg = TokenConfig(**json.loads(fields))
    compile_s, per_ep = measure(cfg, [0], cfg.episodes)
    print(json.dumps({"compile": compile_s, "episode": per_ep}))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--startup-child"]:
        return _startup_child(argv[1])
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--method", default="tpo")
    ap.add_argument("--H", type=int, default=10)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument(
        "--run-batch",
        type=int,
        nargs="*",
        default=[1, 2],
        help="also time several runs with this many vmapped at a time (lax.map over the batches)",
    )
    ap.add_argument("--ops", action="store_true", help="trace the fused episode's kernels (see above)")
    ap.add_argument("--compile", action="store_true", help="split a cold compile into stages; A/B --compare")
    ap.add_argument(
        "--compare",
        nargs="+",
        default=["default", "tpo_core"],
        choices=list(COMPILE_SETTINGS),
        help="compile settings that --compile compares (default: default tpo_core)",
    )
    ap.add_argument(
        "--startup",
        action="store_true",
        help="compile of a 1-seed run in a fresh process: cold, then from the persistent cache",
    )
    ap.add_argument("--out", default=None, help="results file (default benchmarks/results/bench_train.json)")
    args = ap.parse_args(argv)
    if args.ops:  # before the backend starts: XLA's CPU runtime reports per-kernel times to the profiler
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true").strip()
    result = record.header(record.command_line("bench_train", argv, module=True))
    result["machine"]["devices"] = [str(d) for d in jax.devices()]
    result["machine"]["matmul_gflops"] = record.matmul_gflops()
    print(
        f"devices: {jax.devices()} · 2048² matmul {result['machine']['matmul_gflops']:.0f} GFLOP/s · "
        f"load average {result['machine']['loadavg_start'][0]:.1f} on {os.cpu_count()} CPUs"
    )
    cfg = TokenConfig(method=args.method, H=args.H, episodes=args.episodes, track=2)
    result["config"] = {
        "method": args.method,
        "H": args.H,
        "V": cfg.V,
        "B": cfg.B,
        "K": cfg.K,
        "epochs": cfg.n_epochs,
        "episodes": args.episodes,
    }
    base, result["runs"] = None, []
    for s in args.seeds:
        for rb in [None] + ([b for b in args.run_batch if b < s] if s > 1 else []):
            compile_s, per_ep = measure(cfg, list(range(s)), args.episodes, run_batch=rb)
            base = base or per_ep
            form = "vmapped" if rb is None else f"run_batch={rb}"
            result["runs"].append(
                {"seeds": s, "form": form, "compile_s": compile_s, "episode_s": per_ep, "x_first": per_ep / base}
            )
            print(
                f"{args.method} H={args.H} B={cfg.B} K={cfg.K} seeds={s} ({form}): compile {compile_s:5.1f} s, "
                f"{per_ep:.3f} s/episode ({per_ep / s:.3f} s per seed-episode, {1 / per_ep:.2f} episodes/s, "
                f"{per_ep / base:.2f}x the first row's time)",
                flush=True,
            )
    if not args.no_sweep:
        result["sweep"] = {"etas": ETAS, "seeds": 2, "forms": []}
        for rb in [None] + list(args.run_batch):
            compile_s, per_ep = measure(cfg, [0, 1], args.episodes, [{"eta": e} for e in ETAS], run_batch=rb)
            form = "vmapped" if rb is None else f"run_batch={rb}"
            result["sweep"]["forms"].append(
                {"form": form, "compile_s": compile_s, "episode_s": per_ep, "x_first": per_ep / base}
            )
            print(
                f"eta sweep {ETAS} x 2 seeds (one program, 10 runs, {form}): compile {compile_s:5.1f} s, "
                f"{per_ep:.3f} s/episode = {per_ep / base:.2f}x the first row",
                flush=True,
            )
    if not args.no_profile:
        result["profile"] = profile(cfg)
    if args.ops:
        result["ops"] = op_profile(cfg)
    if args.compile:
        result["compile"] = compile_profile(cfg, args.compare)
    if args.startup:
        cold, cached = startup_profile(dict(method=args.method, H=args.H, track=2), args.episodes)
        result["startup"] = {"cold": cold, "from_cache": cached}
        print(
            f"fresh process, 1 seed: compile {cold['compile']:.2f} s with an empty persistent cache "
            f"({cold['cache_files']} files written), {cached['compile']:.2f} s in the next process reading it "
            f"({cold['episode']:.3f} / {cached['episode']:.3f} s/episode)",
            flush=True,
        )
    path = record.write("bench_train", record.finish(result), args.out)
    print(f"wrote {path}")


def rows(result: dict) -> list:
    """The figures of a results file as (what, measured) rows, for ``benchmarks/report.py``."""
    c = result["config"]
    out = [
        (
            "config",
            f"{c['method']}, H = {c['H']}, V = {c['V']}, B = {c['B']}, K = {c['K']}, {c['epochs']} epochs, "
            f"timed over {c['episodes']} episodes after a first chunk of as many",
        )
    ]
    for i, r in enumerate(result["runs"]):
        ratio = f" ({r['x_first']:.2f}× the first row)" if i else ""
        out.append(
            (
                f"{r['seeds']} seed{'s' if r['seeds'] > 1 else ''} ({r['form']}): s / episode, compile",
                f"{r['episode_s']:.3f} s{ratio}, compile {r['compile_s']:.1f} s",
            )
        )
    if "sweep" in result:
        n = len(result["sweep"]["etas"]) * result["sweep"]["seeds"]
        for r in result["sweep"]["forms"]:
            out.append(
                (
                    f"{len(result['sweep']['etas'])}-value η sweep × {result['sweep']['seeds']} seeds, one "
                    f"program of {n} runs ({r['form']})",
                    f"{r['episode_s']:.3f} s / episode ({r['x_first']:.2f}× the first row), compile "
                    f"{r['compile_s']:.1f} s",
                )
            )
    if "profile" in result:
        p = result["profile"]
        out.append(
            (
                "parts jitted alone (best of 5): episode = sampling + epochs × (forward/backward + optimizer)",
                f"{p['episode_s']:.3f} s = {p['sampling_s']:.3f} + {p['epochs']} × ({p['forward_backward_s']:.3f}"
                f" + {p['optimizer_s']:.4f}) s",
            )
        )
    if "ops" in result:
        o = result["ops"]
        for title, key in (("by phase", "by_phase_s"), ("by kind", "by_kind_s")):
            total = o["kernel_s_per_episode"]
            out.append(
                (
                    f"XLA's kernels of the fused episode (`--ops`), {title}",
                    "; ".join(f"{k} {100 * v / total:.0f} %" for k, v in o[key].items()),
                )
            )
    if "compile" in result:
        k = result["compile"]
        stages = ", ".join(f"{t} {v:.2f} s" for t, v in k["stages_s"].items() if v is not None)
        out.append(
            (
                "where a cold compile goes (`--compile`)",
                f"init program {k['init_s']:.2f} s, tracing {k['trace_s']:.2f} s, lowering {k['lower_s']:.2f} s;"
                f" {stages}; {k['llvm_kernels']} fused kernels",
            )
        )
        for name, v in k["settings"].items():
            out.append(
                (
                    f"compile setting `{name}`: compile, s / episode (best, median)",
                    f"{v['compile_s']:.2f} s, {v.get('episode_best_s', float('nan')):.3f} / "
                    f"{v.get('episode_median_s', float('nan')):.3f} s",
                )
            )
    if "startup" in result:
        a, b = result["startup"]["cold"], result["startup"]["from_cache"]
        out.append(
            (
                "compile of the 1-seed run in a fresh process (`--startup`): cold / from the persistent cache",
                f"{a['compile']:.2f} s / {b['compile']:.2f} s",
            )
        )
    return out


def summary(result: dict) -> list:
    """The README's rows: one run's speed and compile, and what several runs cost beside it."""
    c, first = result["config"], result["runs"][0]
    out = [
        (
            f"Table-3 config ({c['method']}, H = {c['H']}, B = {c['B']}, K = {c['K']}), {first['seeds']} seed: "
            "s / episode, compile",
            f"{first['episode_s']:.3f} s, compile {first['compile_s']:.1f} s",
        )
    ]
    more = [r for r in result["runs"][1:] if r["form"] == "vmapped"]
    if more:
        out.append((f"{more[-1]['seeds']} seeds vmapped, × one seed's time", f"{more[-1]['x_first']:.2f}×"))
    if "startup" in result:
        b = result["startup"]["from_cache"]
        out.append(("compile in a later process, from the persistent cache", f"{b['compile']:.2f} s"))
    return out


if __name__ == "__main__":
    main()
