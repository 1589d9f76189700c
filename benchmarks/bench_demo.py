"""How fast the demo answers: explorer latency (in-process and through the real server) and the delay from
pressing Train to the first streamed training update on a warm app.

Usage: python benchmarks/bench_demo.py [--explorer-calls 50] [--train-repeats 3] [--updates 4] [--warm-timeout 900]
                                       [--out benchmarks/results/bench_demo.json]

Starts `python -m demos.app` on a free loopback port with the startup warm-up on, waits for the warm-up
to finish (the default training configuration compiled), then measures through gradio_client. Prints
the figures and writes them, with the command, the date, the commit and the host, to ``--out`` (atomically;
``benchmarks/report.py`` renders it); stops the server at the end.
"""

import argparse
import os
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import numpy as np  # noqa: E402


def latency(ms) -> dict:
    """Median, p95 and max of latencies in milliseconds."""
    ms = sorted(ms)
    p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
    return {"median_ms": statistics.median(ms), "p95_ms": p95, "max_ms": ms[-1], "n": len(ms)}


def _text(lat: dict) -> str:
    return (
        f"median {lat['median_ms']:6.1f} ms · p95 {lat['p95_ms']:6.1f} ms · max {lat['max_ms']:6.1f} ms "
        f"(n = {lat['n']})"
    )


def explorer_inputs(rng):
    from demos import explorer as X

    K = int(rng.integers(2, X.MAX_K + 1))
    return (
        K,
        float(rng.choice([0.05, 0.25, 0.5, 1.0, 2.0, 5.0])),
        str(rng.choice([p for p in X.SCORE_PRESETS if p != "custom"])),
        "",
        str(rng.choice(["uniform", "random", "success unlikely"])),
        "",
        int(rng.integers(0, 100)),
    )


def bench_in_process(n):
    from demos import app

    app.explore(*explorer_inputs(np.random.default_rng(0)))  # imports, first figure
    rng = np.random.default_rng(1)
    ms = []
    for _ in range(n):
        args = explorer_inputs(rng)
        t0 = time.perf_counter()
        out = app.explore(*args)
        ms.append(1000 * (time.perf_counter() - t0))
        assert out[2] == "", out[2]
    return ms


def bench_server(args, result: dict):
    from gradio_client import Client

    from demos.server_process import running_server
    from demos.training import DEFAULTS, train_args
    from tpo_core.stream import family

    with running_server(warm=True) as server:
        t0 = time.perf_counter()
        client = Client(server.url, verbose=False, httpx_kwargs={"timeout": 120.0})
        result["connect_ms"] = 1000 * (time.perf_counter() - t0)
        print(f"gradio_client connect: {result['connect_ms']:.0f} ms")
        rng = np.random.default_rng(2)
        client.predict(*explorer_inputs(rng), api_name="/explore")
        ms = []
        for _ in range(args.explorer_calls):
            inputs = explorer_inputs(rng)
            t0 = time.perf_counter()
            out = client.predict(*inputs, api_name="/explore")
            ms.append(1000 * (time.perf_counter() - t0))
            assert out[2] == "", out[2]
        result["explorer_server_warming"] = latency(ms)
        print(f"explorer through the server (predict → result), cold warm-up running: {_text(latency(ms))}")

        t0 = time.perf_counter()
        if not server.wait_for_line("warm-up done", args.warm_timeout):
            print(
                f"warm-up did not finish within {args.warm_timeout} s; last log lines:\n" + "\n".join(server.log[-5:])
            )
            result["warm_up"] = None
            return
        line = next(x for x in server.log if "warm-up done" in x)
        result["warm_up"] = line.split("compiled in")[-1].strip()
        print(f"startup warm-up: {result['warm_up']} (waited {time.perf_counter() - t0:.0f} s more)")
        ms = []
        for _ in range(args.explorer_calls):
            inputs = explorer_inputs(rng)
            t0 = time.perf_counter()
            client.predict(*inputs, api_name="/explore")
            ms.append(1000 * (time.perf_counter() - t0))
        result["explorer_server_idle"] = latency(ms)
        print(f"explorer through the server, idle server: {_text(latency(ms))}")

        d = DEFAULTS
        fam = family(d["task"])
        size = (
            f"{fam.name}, H={d['H']}, B={d['B']}, K={d['K']}, {d['episodes']} episodes"
            if fam.is_token
            else f"{fam.name}, {d['bandit_steps']} steps"
        )
        unit = fam.unit
        result["training"] = {"run": f"{', '.join(d['methods'])}, {size}", "unit": unit, "runs": []}
        print(
            f"default training run: {', '.join(d['methods'])}, {size}; run 1 at the default η, later runs at a "
            f"new η and seed (η and the seed are traced: same compiled program)"
        )
        etas = [d["eta"], 0.5, 2.0, 0.25]
        for r in range(args.train_repeats):
            eta, seed = etas[r % len(etas)], d["seed"] + r
            t0 = time.perf_counter()
            job = client.submit(*train_args(eta=eta, seed=seed), api_name="/train")
            first_status = first_data = None
            data_times = []
            for out in job:
                now = time.perf_counter() - t0
                status = out[0]
                if first_status is None:
                    first_status = now
                if "/ " in status and not status.startswith("**0 /"):
                    data_times.append((now, int(status.split("**")[1].split("/")[0])))
                    if first_data is None:
                        first_data = now
                if len(data_times) >= args.updates:
                    break
            (t_a, e_a), (t_b, e_b) = data_times[min(1, len(data_times) - 1)], data_times[-1]
            rate = (t_b - t_a) / max(e_b - e_a, 1)
            result["training"]["runs"].append(
                {
                    "eta": eta,
                    "seed": seed,
                    "first_status_ms": 1000 * first_status,
                    "first_data_ms": 1000 * first_data,
                    "s_per_unit": rate,
                }
            )
            print(
                f"  run {r + 1} (η={eta:g}, seed {seed}): first status {1000 * first_status:.0f} ms · first data "
                f"update {1000 * first_data:.0f} ms after the click · then {rate:.4f} s per {unit} for "
                f"{len(d['methods'])} methods ({e_b} {unit}s in {t_b:.1f} s)",
                flush=True,
            )
            try:
                job.cancel()  # what the Stop button does
            except Exception as e:  # a CPU-starved server may answer late; the run still stops with the server
                print(f"  (cancel request failed: {e!r})")
            time.sleep(2)


def main(argv=None):
    from benchmarks import record

    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--explorer-calls", type=int, default=50)
    ap.add_argument("--train-repeats", type=int, default=3)
    ap.add_argument("--updates", type=int, default=4, help="streamed data updates to wait for per training run")
    ap.add_argument("--warm-timeout", type=float, default=900.0)
    ap.add_argument("--out", default=None, help="results file (default benchmarks/results/bench_demo.json)")
    args = ap.parse_args(argv)
    result = record.header(record.command_line("bench_demo", argv))
    print(f"load average: {result['machine']['loadavg_start'][0]:.1f} on {os.cpu_count()} CPUs")
    result["explorer_in_process"] = latency(bench_in_process(args.explorer_calls))
    print(f"explorer callback in-process: {_text(result['explorer_in_process'])}")
    bench_server(args, result)
    path = record.write("bench_demo", record.finish(result), args.out)
    print(f"wrote {path}")


def rows(result: dict) -> list:
    """The figures of a results file as (what, measured) rows, for ``benchmarks/report.py``."""

    def lat(x):
        return f"{x['median_ms']:.1f} ms median, {x['p95_ms']:.1f} ms p95 (n = {x['n']})"

    out = [("explorer callback in-process", lat(result["explorer_in_process"]))]
    if "explorer_server_warming" in result:
        out.append(
            (
                "explorer through the server (gradio_client predict → result), startup warm-up running",
                lat(result["explorer_server_warming"]),
            )
        )
    if result.get("warm_up"):
        out.append(("startup warm-up (the default training configuration compiled)", result["warm_up"]))
    if "explorer_server_idle" in result:
        out.append(("explorer through the idle server", lat(result["explorer_server_idle"])))
    t = result.get("training")
    for i, r in enumerate(t["runs"] if t else []):
        out.append(
            (
                f"default run ({t['run']}), run {i + 1} (η = {r['eta']:g}, seed {r['seed']}): first status / "
                f"first data update after the click, then s per {t['unit']}",
                f"{r['first_status_ms']:.0f} / {r['first_data_ms']:.0f} ms, {r['s_per_unit']:.4f} s",
            )
        )
    return out


def summary(result: dict) -> list:
    """The README's rows: the explorer through the idle server and the first streamed training update."""
    out = []
    if "explorer_server_idle" in result:
        out.append(
            ("demo: explorer through the idle server, median", f"{result['explorer_server_idle']['median_ms']:.0f} ms")
        )
    runs = (result.get("training") or {}).get("runs") or []
    if runs:
        first = sorted(r["first_data_ms"] for r in runs)
        out.append(
            (
                "demo: Train click → first streamed data update (warm app)",
                f"{first[0]:.0f}–{first[-1]:.0f} ms over {len(first)} runs",
            )
        )
    return out


if __name__ == "__main__":
    main()
