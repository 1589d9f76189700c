"""Load test: 20 concurrent sessions against the real demo server on 127.0.0.1, through gradio_client.

Usage: python benchmarks/load_test_demo.py [--sessions 20] [--explore-calls 5] [--train-every 2]
                                           [--deadline 600] [--url http://127.0.0.1:7860/]

Without --url it starts `python -m demos.app` on a free loopback port (warm-up off) and stops it at
the end. Each session (one thread, its own Client, so its own server-side session state) calls the
explorer ``--explore-calls`` times with random inputs; every ``--train-every``-th session also runs a
tiny training job (TPO, H = 3, B = 8, K = 4, 4 episodes), which queues behind the training
concurrency limit (2). Bounded: every session stops at ``--deadline`` seconds. Prints successes,
errors and latencies per endpoint; exits 1 if any call failed.
"""
import argparse
import collections
import contextlib
import os
import pathlib
import statistics
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import numpy as np  # noqa: E402

TINY_TRAIN = ("token reversal", ["tpo"], "terminal", 3, 8, 4, 1.0, 4, 1, 0, 1000)


def session(i, url, args, results, lock, t_end):
    from gradio_client import Client

    rng = np.random.default_rng(i)

    def record(kind, ok, seconds, err=None):
        with lock:
            results[kind].append((ok, seconds, err))

    try:
        t0 = time.perf_counter()
        # generous HTTP timeout: on a shared 2-core machine the server can be CPU-starved for seconds
        client = Client(url, verbose=False, httpx_kwargs={"timeout": args.http_timeout})
        record("connect", True, time.perf_counter() - t0)
    except Exception as e:
        record("connect", False, 0.0, repr(e))
        return
    calls = [("explore", None)] * args.explore_calls
    if args.train_every and i % args.train_every == 0:
        calls.insert(len(calls) // 2, ("train", None))
    for kind, _ in calls:
        if time.time() > t_end:
            record(kind, False, 0.0, "deadline reached before the call")
            continue
        t0 = time.perf_counter()
        try:
            if kind == "explore":
                K = int(rng.integers(2, 65))
                scores = ", ".join(str(int(v)) for v in rng.integers(0, 2, K))
                out = client.predict(K, float(rng.choice([0.1, 0.5, 1.0, 2.0])), "custom", scores, "random", "",
                                     int(rng.integers(0, 1000)), api_name="/explore")
                ok = out[2] == "" and out[4]["type"] == "plotly"
                err = None if ok else f"unexpected output: {out[2]!r}"
            else:
                job = client.submit(*TINY_TRAIN, api_name="/train")
                remaining = max(t_end - time.time(), 1.0)
                out = job.result(timeout=remaining)
                ok = "4 / 4 episodes" in out[0] and "done" in out[0]
                err = None if ok else f"unexpected status: {out[0]!r}"
        except Exception as e:
            ok, err = False, repr(e)[:300]
        record(kind, ok, time.perf_counter() - t0, err)


def report(results, wall):
    print(f"wall time {wall:.1f} s")
    failed = 0
    for kind in ("connect", "explore", "train"):
        rows = results.get(kind, [])
        if not rows:
            continue
        ok = [s for good, s, _ in rows if good]
        errors = [e for good, _, e in rows if not good]
        failed += len(errors)
        lat = ""
        if ok:
            ms = sorted(1000 * s for s in ok)
            p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
            lat = f" · latency median {statistics.median(ms):.0f} ms, p95 {p95:.0f} ms, max {ms[-1]:.0f} ms"
        print(f"{kind:8s}: {len(ok)} ok, {len(errors)} errors{lat}")
        for e in collections.Counter(errors).most_common(3):
            print(f"          {e[1]} × {e[0]}")
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--explore-calls", type=int, default=5)
    ap.add_argument("--train-every", type=int, default=2, help="every n-th session also trains (0: none)")
    ap.add_argument("--deadline", type=float, default=600.0, help="seconds; every session stops by then")
    ap.add_argument("--http-timeout", type=float, default=120.0, help="seconds per HTTP request of a client")
    ap.add_argument("--url", default=None, help="an already running demo (default: start one)")
    args = ap.parse_args()

    from demos.server_process import running_server

    ctx = contextlib.nullcontext(type("S", (), {"url": args.url})) if args.url else running_server(warm=False)
    with ctx as server:
        print(f"{args.sessions} sessions against {server.url} · load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs")
        results, lock = collections.defaultdict(list), threading.Lock()
        t0 = time.time()
        t_end = t0 + args.deadline
        threads = [threading.Thread(target=session, args=(i, server.url, args, results, lock, t_end), daemon=True)
                   for i in range(args.sessions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=max(t_end - time.time(), 0) + 30)
        alive = sum(t.is_alive() for t in threads)
        failed = report(results, time.time() - t0)
        if alive:
            print(f"{alive} sessions still running at the deadline (counted as failures)")
            failed += alive
    print("PASS" if failed == 0 else f"FAIL ({failed} failed calls)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
