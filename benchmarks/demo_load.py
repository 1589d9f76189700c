"""Load test of the demo's training endpoint: many sessions that each train, and the server's memory over 100 runs.

Usage: python benchmarks/demo_load.py [--sessions 20] [--trainings 100] [--sample-every 10] [--parallel 2]
                                      [--episodes 6] [--threshold-mb 50] [--no-warm] [--no-queue-check]
                                      [--max-sessions N]
                                      [--out benchmarks/results/demo_load.json]

Starts ``python -m demos.app`` on a free loopback port (startup warm-up on unless ``--no-warm``; it waits for the
warm-up to finish), then drives it through ``gradio_client`` only, with the app's public ``/train`` endpoint. One
untimed run first compiles the benchmark's config (the warm-up compiles the app's default one), then:

(a) ``--sessions`` concurrent sessions (one thread and one ``Client`` each, so one server-side session each) submit
    at the same moment one small training each (the token task, TPO, H = 3, B = 8, K = 4, ``--episodes``), every
    session with its own seed and η, and consume the streamed updates. Per session: errors, time from submit to
    the first streamed update (the run has left the queue) and to the first data update, total latency. Each
    session's final plots must be its own: (i) every later run of the same (seed, η) in phase (b), from other
    sessions, must stream exactly the same plot data, and the sessions' (seed, η) must all give different data,
    so a session handed another's run, or a mix of two, fails; (ii) where the final tracked group holds both
    successes and failures, its TPO target q in the plot must equal p_old·exp(u/η)/Z computed here from the
    plot's p_old and successes with the session's own η (a closed form, independent of the server's code).
(b) ``--trainings`` trainings, each from a new session, ``--parallel`` at a time (the app trains two at a
    time), cycling through the (seed, η) of phase (a). The server's resident memory (VmRSS, /proc/PID/status) is
    read with the server idle before the first, and after every ``--sample-every`` trainings. By then the compile
    run and phase (a) have compiled the config's chunk programs and cached the initial states of its (seed, η);
    what may still grow is bounded: Gradio's record of each session (≈ 0.17 MB each, measured with explorer-only
    sessions; at most the app's ``--max-sessions``) and the allocator's arenas. The verdict is "no growth beyond
    the compile cache" when RSS after all trainings minus RSS after the first ``--sample-every`` is below
    ``--threshold-mb``. The default, 50 MB, is above what 90 new sessions' records add (≈ 15 MB) and below what
    keeping one run's training state per training would add over those 90 (the initial carry of this config,
    measured here with the engine and recorded as ``carry_mb``: ≈ 0.9 MB, ×90 ≈ 85 MB); a program recompiled per
    run would add more.
(c) the queue bound: ``TRAINING_CONCURRENCY`` long runs occupy the trainers, then ``QUEUE_MAX_SIZE`` more runs
    wait in the queue, then further submissions must each get Gradio's clean "queue full" rejection (HTTP 503,
    ``QueueError`` in the client) while the queue never holds more than ``QUEUE_MAX_SIZE``; every run is then
    cancelled, and the server must come back to an empty queue and train a fresh run without error.

Prints a table and writes ``--out`` atomically (``benchmarks.record``: the command, the date, the commit and the
host open the file; ``benchmarks/report.py`` renders it). The machine is shared by other jobs: the load average at
start and end is recorded with the figures.
"""

from __future__ import annotations

import argparse
import base64
import collections
import hashlib
import json
import os
import pathlib
import statistics
import sys
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import numpy as np  # noqa: E402

from tpo_core.constants import TOKEN_REVERSAL  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "demo_load.json"

TASK, METHODS, REWARD, H, B, K = TOKEN_REVERSAL, ["tpo"], "terminal", 3, 8, 4
HTTP_TIMEOUT = 600.0  # seconds per HTTP request of a client: a CPU-starved server can answer late
LONG_EPISODES = 2000  # the runs that hold the trainers busy in the queue check (cancelled early)


class UsageError(Exception):
    """Bad command-line input: one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        raise UsageError(message)


def _int_range(name, lo, hi):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{name} must be between {lo} and {hi}, got {v}")
        return v

    return parse


def _positive_float(name):
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not v > 0 or v != v or v == float("inf"):
            raise argparse.ArgumentTypeError(f"{name} must be a finite number > 0, got {text}")
        return v

    return parse


def parse_args(argv=None):
    ap = _Parser(
        prog="python benchmarks/demo_load.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    integers = (  # (option, low, high, default, help)
        ("--sessions", 1, 200, 20, "concurrent training sessions in phase (a)"),
        ("--trainings", 1, 10_000, 100, "trainings in phase (b), each from a new session"),
        ("--sample-every", 1, 10_000, 10, "read the server's RSS after every this many trainings of phase (b)"),
        ("--parallel", 1, 64, 2, "trainings submitted at a time in phase (b)"),
        ("--episodes", 1, 200, 6, "episodes per training"),
    )
    for name, lo, hi, default, text in integers:
        ap.add_argument(name, type=_int_range(name, lo, hi), default=default, help=text)
    ap.add_argument(
        "--threshold-mb",
        type=_positive_float("--threshold-mb"),
        default=50.0,
        help="largest RSS growth (after all trainings minus after the first --sample-every) that counts as no growth",
    )
    ap.add_argument("--no-warm", action="store_true", help="start the server without its startup warm-up")
    ap.add_argument(
        "--max-sessions",
        type=_int_range("--max-sessions", 1, 10**6),
        default=None,
        help="the server's --max-sessions (default: the app's own)",
    )
    ap.add_argument("--no-queue-check", action="store_true", help="skip phase (c)")
    ap.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help="results file (JSON)")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.sample_every > args.trainings:
        raise UsageError(f"--sample-every ({args.sample_every}) must not exceed --trainings ({args.trainings})")
    return args


# --------------------------------------------------------------------------------------------
# what the server streams
# --------------------------------------------------------------------------------------------
def session_params(i: int) -> dict:
    """Session i's own (seed, η): every session differs in both (η on the UI slider's 0.05 grid)."""
    return {"seed": 100 + i, "eta": round(0.5 + 0.05 * (i % 60), 2)}


def train_args(seed: int, eta: float, episodes: int) -> tuple:
    """The /train endpoint's inputs: task, methods, reward, H, B, K, η, episodes, seeds, first seed, MNIST steps."""
    return (TASK, METHODS, REWARD, H, B, K, eta, episodes, 1, seed, 1000)


def _array(v):
    """A plotly array as JSON carries it: a list, or plotly >= 6's typed array {"dtype", "bdata" (base64)}."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return v


def plot_traces(payload) -> list:
    """[(trace name, x, y)] of one gr.Plot value as the API returns it ({"type": "plotly", "plot": json})."""
    if not (isinstance(payload, dict) and payload.get("type") == "plotly"):
        raise ValueError(f"not a plotly payload: {str(payload)[:80]!r}")
    fig = json.loads(payload["plot"])
    return [(t.get("name"), _array(t.get("x")), _array(t.get("y"))) for t in fig["data"]]


def plot_signature(outputs) -> str:
    """Digest of the data of the four plots of one streamed update (status text and its timing left out)."""
    data = [plot_traces(p) for p in outputs[1:5]]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def tracked_q_check(pq_payload, eta: float):
    """The final tracked group against TPO's closed form, from the plot alone: None when the group is
    all-equal (q = p_old for every η, nothing to check), else (max |q_plot − q_closed_form|, K).

    The bars' labels mark with ✓ the answers scoring above the group mean, which under the terminal reward
    (scores 0 or 1) are exactly the successes. With m successes of K, p = m/K, the population z-score is
    u = √((1−p)/p) for a success and −√(p/(1−p)) for a failure, and q_i = p_old,i·exp(u_i/η) / Σ_j (same)."""
    traces = {name: (x, y) for name, x, y in plot_traces(pq_payload)}
    if "q (TPO target)" not in traces or "p_old (epoch 1)" not in traces:
        return None
    names, p_old = traces["p_old (epoch 1)"]
    _, q = traces["q (TPO target)"]
    s = np.array(["✓" in str(n) for n in names], float)
    m, k = s.sum(), len(s)
    if m in (0, k):
        return None
    p = m / k
    u = np.where(s == 1, np.sqrt((1 - p) / p), -np.sqrt(p / (1 - p)))
    w = np.asarray(p_old, float) * np.exp(u / eta)
    return float(np.max(np.abs(np.asarray(q, float) - w / w.sum()))), int(k)


Q_ATOL = 1e-4  # q in the plot is float32 and its p_old comes from the training pass, q from the sampling pass


def run_training(url: str, seed: int, eta: float, episodes: int, client=None, barrier=None) -> dict:
    """One training through a session's own client: the streamed updates, their timing and a digest of the plots."""
    from gradio_client import Client

    rec = {"seed": seed, "eta": eta, "ok": False, "error": None}
    try:
        t0 = time.perf_counter()
        client = client or Client(url, verbose=False, httpx_kwargs={"timeout": HTTP_TIMEOUT})
        rec["connect_s"] = time.perf_counter() - t0
        if barrier is not None:
            barrier.wait()
        t0 = time.perf_counter()
        job = client.submit(*train_args(seed, eta, episodes), api_name="/train")
        n, first, first_data, last, payload = 0, None, None, None, 0
        for out in job:
            now = time.perf_counter() - t0
            n += 1
            payload += len(json.dumps(out))
            first = now if first is None else first
            if first_data is None and not str(out[0]).startswith("**0 /"):
                first_data = now
            last = out
        rec.update(
            total_s=time.perf_counter() - t0,
            first_update_s=first,
            first_data_s=first_data,
            updates=n,
            payload_bytes=payload,
        )
        if not job.status().success:
            raise RuntimeError(f"job ended without success: {job.status()}")
        done = f"{episodes} / {episodes} episodes"
        if last is None or done not in last[0] or "done" not in last[0]:
            raise RuntimeError(f"last status is not '{done} … done': {None if last is None else last[0]!r}")
        rec["signature"] = plot_signature(last)
        chk = tracked_q_check(last[4], eta)
        rec["q_error"] = None if chk is None else chk[0]
        rec["ok"] = True
    except Exception as e:  # every failure is recorded, none ends the benchmark
        rec["error"] = f"{type(e).__name__}: {e}"[:300]
    finally:
        if client is not None:
            try:
                client.close()
            except Exception:
                pass
    return rec


# --------------------------------------------------------------------------------------------
# the phases
# --------------------------------------------------------------------------------------------
def concurrent_sessions(url: str, n: int, episodes: int) -> list:
    """Phase (a): n sessions, each its own thread and Client, submit at one barrier."""
    from gradio_client import Client

    clients = [Client(url, verbose=False, httpx_kwargs={"timeout": HTTP_TIMEOUT}) for _ in range(n)]
    barrier = threading.Barrier(n)
    recs = [None] * n

    def work(i):
        p = session_params(i)
        recs[i] = dict(session=i, **run_training(url, p["seed"], p["eta"], episodes, clients[i], barrier))

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return recs


def rss_mb(pid: int) -> float:
    """VmRSS of a process, in MB (10⁶ bytes)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError(f"no VmRSS for process {pid}")


def idle_rss(url: str, pid: int, settle: float = 2.0) -> float:
    """The server's RSS once its queue is empty and it has had ``settle`` seconds to return freed memory."""
    deadline = time.time() + 120
    while queue_size(url) and time.time() < deadline:
        time.sleep(0.5)
    time.sleep(settle)
    return rss_mb(pid)


def queue_size(url: str) -> int:
    with urllib.request.urlopen(url.rstrip("/") + "/gradio_api/queue/status", timeout=60) as r:
        return int(json.load(r)["queue_size"])


def sequential_trainings(
    url: str, pid: int, n: int, every: int, parallel: int, n_sessions: int, episodes: int, log=print
):
    """Phase (b): n trainings, each from a new session, ``parallel`` at a time, in blocks of ``every`` with the
    server's idle RSS read before the first block and after each."""
    recs = []
    samples = [{"trainings": 0, "rss_mb": idle_rss(url, pid)}]
    log(f"  RSS before phase (b): {samples[0]['rss_mb']:.1f} MB")
    lock = threading.Lock()
    j = 0
    while j < n:
        block = list(range(j, min(j + every, n)))
        todo = collections.deque(block)

        def worker(todo=todo):  # this block's queue
            while True:
                with lock:
                    if not todo:
                        return
                    i = todo.popleft()
                p = session_params(i % n_sessions)
                rec = dict(training=i, config=i % n_sessions, **run_training(url, p["seed"], p["eta"], episodes))
                with lock:
                    recs.append(rec)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(parallel, len(block)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        j = block[-1] + 1
        samples.append({"trainings": j, "rss_mb": idle_rss(url, pid)})
        errs = sum(not r["ok"] for r in recs)
        log(f"  {j:4d} trainings · RSS {samples[-1]['rss_mb']:.1f} MB · {errs} errors so far")
    recs.sort(key=lambda r: r["training"])
    return recs, samples


def queue_check(url: str, concurrency: int, max_size: int, extra: int = 4, log=print) -> dict:
    """Phase (c): fill the trainers and the queue, then the next submissions must be refused cleanly."""
    from gradio_client import Client
    from gradio_client.utils import QueueError

    out = {"concurrency": concurrency, "max_size": max_size, "extra_submitted": extra}
    client = Client(url, verbose=False, httpx_kwargs={"timeout": HTTP_TIMEOUT}, max_workers=max_size + extra + 8)
    blockers = [client.submit(*train_args(900 + i, 1.0, LONG_EPISODES), api_name="/train") for i in range(concurrency)]
    t0 = time.time()
    while time.time() - t0 < 300 and not all(len(b.outputs()) > 0 for b in blockers):
        time.sleep(0.2)
    out["blockers_running"] = all(len(b.outputs()) > 0 for b in blockers)
    waiting = [client.submit(*train_args(1000 + i, 1.0, 1), api_name="/train") for i in range(max_size)]
    peak, t0 = 0, time.time()
    while time.time() - t0 < 120:
        peak = max(peak, queue_size(url))
        if peak >= max_size:
            break
        time.sleep(0.2)
    out["queue_size_when_full"] = peak
    refused, other = [], []
    for i in range(extra):
        job = client.submit(*train_args(2000 + i, 1.0, 1), api_name="/train")
        try:
            job.result(timeout=120)
            other.append("accepted")
        except QueueError as e:
            refused.append(str(e))
        except Exception as e:
            other.append(f"{type(e).__name__}: {e}"[:200])
        peak = max(peak, queue_size(url))
    out.update(
        refused=len(refused), refusal_message=refused[0] if refused else None, not_refused=other, peak_queue_size=peak
    )
    for job in waiting + blockers:
        job.cancel()
    t0 = time.time()
    while time.time() - t0 < 300 and queue_size(url):
        time.sleep(0.5)
    out["drained_s"] = time.time() - t0
    out["queue_size_after_cancel"] = queue_size(url)
    time.sleep(3)  # the cancelled long runs end at their next chunk
    try:
        client.close()
    except Exception:
        pass
    fresh = run_training(url, 3000, 1.0, 1)
    out["fresh_run_after"] = "ok" if fresh["ok"] else fresh["error"]
    out["ok"] = (
        out["blockers_running"]
        and peak <= max_size
        and out["queue_size_when_full"] == max_size
        and len(refused) == extra
        and not other
        and out["queue_size_after_cancel"] == 0
        and fresh["ok"]
    )
    log(
        f"  queue full at {out['queue_size_when_full']} waiting · {len(refused)}/{extra} refused "
        f"({out['refusal_message']!r}) · peak {peak} · drained in {out['drained_s']:.1f} s · fresh run "
        f"{out['fresh_run_after']}"
    )
    return out


# --------------------------------------------------------------------------------------------
# verdicts and the summary
# --------------------------------------------------------------------------------------------
def own_data(sessions: list, trainings: list, n_sessions: int) -> dict:
    """Each session's data its own: same (seed, η) → the same plots in every session; different → different."""
    by_config = collections.defaultdict(set)
    for r in sessions:
        if r["ok"]:
            by_config[r["session"]].add(r["signature"])
    for r in trainings:
        if r["ok"]:
            by_config[r["config"]].add(r["signature"])
    inconsistent = sorted(c for c, sigs in by_config.items() if len(sigs) != 1)
    firsts = {c: next(iter(s)) for c, s in by_config.items() if len(s) == 1}
    shared = collections.Counter(firsts.values())
    collisions = sorted(c for c, s in firsts.items() if shared[s] > 1)
    checked = [r for r in sessions + trainings if r["ok"] and r.get("q_error") is not None]
    q_bad = [r for r in checked if r["q_error"] > Q_ATOL]
    return {
        "configs": len(by_config),
        "configs_inconsistent": inconsistent,
        "configs_with_same_data": collisions,
        "q_checked_runs": len(checked),
        "q_checked_configs": len({(r["seed"], r["eta"]) for r in checked}),
        "q_max_error": max((r["q_error"] for r in checked), default=None),
        "q_failed": len(q_bad),
        "ok": not inconsistent and not collisions and not q_bad,
    }


def pct(values, q):
    return float(np.percentile(np.asarray(values, float), q)) if values else None


def latency_summary(recs) -> dict:
    ok = [r for r in recs if r["ok"]]
    tot = [r["total_s"] for r in ok]
    first = [r["first_update_s"] for r in ok]
    data = [r["first_data_s"] for r in ok if r.get("first_data_s") is not None]
    return {
        "n": len(recs),
        "errors": sum(not r["ok"] for r in recs),
        "error_messages": sorted(collections.Counter(r["error"] for r in recs if not r["ok"]).items())[:5],
        "latency_s": {"p50": pct(tot, 50), "p90": pct(tot, 90), "p99": pct(tot, 99), "max": max(tot, default=None)},
        "first_update_s": {"p50": pct(first, 50), "p90": pct(first, 90), "max": max(first, default=None)},
        "first_data_s": {"p50": pct(data, 50), "p90": pct(data, 90)},
        "payload_bytes_median": statistics.median([r["payload_bytes"] for r in ok]) if ok else None,
    }


def memory_verdict(samples: list, every: int, threshold_mb: float) -> dict:
    by_n = {s["trainings"]: s["rss_mb"] for s in samples}
    before, after_first, after_all = by_n[0], by_n[every], samples[-1]["rss_mb"]
    growth = after_all - after_first
    xs = [s["trainings"] for s in samples if s["trainings"] >= every]
    ys = [s["rss_mb"] for s in samples if s["trainings"] >= every]
    slope = float(np.polyfit(xs, ys, 1)[0]) if len(xs) >= 2 else None
    return {
        "rss_before_mb": before,
        f"rss_after_{every}_mb": after_first,
        "rss_after_first_block_mb": after_first,
        "rss_after_all_mb": after_all,
        "first_block": every,
        "growth_after_first_block_mb": growth,
        "slope_mb_per_training": slope,
        "threshold_mb": threshold_mb,
        "ok": growth < threshold_mb,
        "verdict": (
            "no growth beyond the compile cache"
            if growth < threshold_mb
            else f"RSS grew {growth:.1f} MB after the first {every} trainings (threshold {threshold_mb:g} MB)"
        ),
    }


def carry_mb(episodes: int) -> float:
    """Size of one run's initial carry at the benchmark's config, from the engine (``tpo_core.train``)."""
    import jax

    from tpo_core.config import TokenConfig
    from tpo_core.train import make_token_program

    cfg = TokenConfig(method=METHODS[0], reward=REWARD, H=H, B=B, K=K, eta=1.0, episodes=episodes)
    carry = make_token_program(cfg.interaction_matched()).init([0])
    return sum(x.nbytes for x in jax.tree.leaves(carry)) / 1e6


def _f(v, fmt="{:.2f}"):
    return "—" if v is None else fmt.format(v)


def rows(result: dict) -> list:
    """The figures of a results file as (what, measured) rows: printed by the benchmark, rendered by
    ``benchmarks/report.py``."""
    s, t, m = result["sessions"], result["trainings"], result["memory"]
    q = result.get("queue") or {}
    rows = [
        ("concurrent sessions, each training", f"{s['n']}"),
        ("their errors", f"{s['errors']}"),
        (
            "latency submit → done, p50 / p90 / p99",
            " / ".join(_f(s["latency_s"][k]) for k in ("p50", "p90", "p99")) + " s",
        ),
        ("submit → first update, p50 / p90", " / ".join(_f(s["first_update_s"][k]) for k in ("p50", "p90")) + " s"),
        ("each session's plots its own", "yes" if result["own_data"]["ok"] else "**no**"),
        ("trainings, one new session each", f"{t['n']} ({result['config']['parallel']} at a time)"),
        ("their errors", f"{t['errors']}"),
        ("their latency p50 / p90 / p99", " / ".join(_f(t["latency_s"][k]) for k in ("p50", "p90", "p99")) + " s"),
        (
            f"server RSS: idle at start / after the {s['n']} sessions / after {m['first_block']} and "
            f"{t['n']} more trainings",
            f"{m['rss_at_start_mb']:.0f} / {m['rss_before_mb']:.0f} / {m['rss_after_first_block_mb']:.0f} / "
            f"{m['rss_after_all_mb']:.0f} MB",
        ),
        (
            f"growth after the first {m['first_block']} (threshold {m['threshold_mb']:g} MB)",
            f"{m['growth_after_first_block_mb']:+.1f} MB: {m['verdict']}",
        ),
    ]
    if q:
        rows.append(
            (
                f"queue ({q['concurrency']} training + {q['max_size']} waiting)",
                f'{q["refused"]} of {q["extra_submitted"]} more refused "queue full", peak '
                f"{q['peak_queue_size']} waiting, fresh run after: {q['fresh_run_after']}",
            )
        )
    return rows


def summary(result: dict) -> list:
    """The README's rows: errors and latency under concurrent sessions, and the memory verdict."""
    s, t, m = result["sessions"], result["trainings"], result["memory"]
    return [
        (
            f"demo under load: {s['n']} concurrent training sessions + {t['n']} trainings, errors; "
            "one training's latency p50 / p90",
            f"{s['errors'] + t['errors']}; " + " / ".join(_f(t["latency_s"][k]) for k in ("p50", "p90")) + " s",
        ),
        (
            f"demo server memory after {t['n']} trainings",
            f"{m['growth_after_first_block_mb']:+.1f} MB after the first {m['first_block']}: {m['verdict']}",
        ),
    ]


def table(result: dict) -> str:
    """The figures as a Markdown table (what the benchmark prints)."""
    return "\n".join(["| what | measured |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows(result)])


def run(args, log=print) -> dict:
    """All three phases against a fresh server; returns the result dict (not yet written)."""
    from benchmarks import record
    from demos import app
    from demos.server_process import running_server

    result = record.header(record.command_line("demo_load", args.argv))
    load0 = result["machine"]["loadavg_start"]
    result.update(
        {
            "config": {
                "run": f"{TASK}, {', '.join(METHODS)}, {REWARD} reward, H = {H}, B = {B}, K = {K}, "
                f"{args.episodes} episodes, 1 seed",
                "episodes": args.episodes,
                "sessions": args.sessions,
                "trainings": args.trainings,
                "sample_every": args.sample_every,
                "parallel": args.parallel,
                "warm_up": not args.no_warm,
                "training_concurrency": app.TRAINING_CONCURRENCY,
                "queue_max_size": app.QUEUE_MAX_SIZE,
                "max_sessions": args.max_sessions or app.STATE_SESSION_CAPACITY,
            }
        }
    )
    t_start = time.time()
    extra = () if args.max_sessions is None else ("--max-sessions", str(args.max_sessions))
    with running_server(warm=not args.no_warm, extra_args=extra) as server:
        pid = server.proc.pid
        log(f"server {server.url} (pid {pid}) · load average {load0[0]:.1f} on {os.cpu_count()} CPUs")
        if not args.no_warm:
            t0 = time.time()
            if not server.wait_for_line("warm-up", 1800):
                raise RuntimeError("the startup warm-up did not finish within 1800 s")
            log(
                f"  warm-up finished ({time.time() - t0:.0f} s after the server answered): "
                f"{next(x for x in server.log if 'warm-up' in x)}"
            )
        result["memory_at_start_mb"] = idle_rss(server.url, pid)
        # one untimed run first compiles the benchmark's config (the warm-up compiles the app's default one), so
        # phase (a) measures queueing and streaming, not one compile that every session would wait behind
        t0 = time.time()
        first = run_training(server.url, 0, 1.0, args.episodes)
        result["compile_run"] = {"ok": first["ok"], "error": first["error"], "total_s": time.time() - t0}
        result["memory_after_compile_run_mb"] = idle_rss(server.url, pid)
        log(
            f"  compile run (seed 0, η 1): {result['compile_run']['total_s']:.1f} s, "
            f"{'ok' if first['ok'] else first['error']}"
        )
        log(f"(a) {args.sessions} concurrent sessions, each training")
        t0 = time.time()
        sessions = concurrent_sessions(server.url, args.sessions, args.episodes)
        result["sessions_wall_s"] = time.time() - t0
        log(f"  done in {result['sessions_wall_s']:.1f} s · {sum(not r['ok'] for r in sessions)} errors")
        log(f"(b) {args.trainings} trainings, {args.parallel} at a time, one new session each")
        t0 = time.time()
        trainings, samples = sequential_trainings(
            server.url, pid, args.trainings, args.sample_every, args.parallel, args.sessions, args.episodes, log
        )
        result["trainings_wall_s"] = time.time() - t0
        if not args.no_queue_check:
            log(f"(c) queue bound: {app.TRAINING_CONCURRENCY} training + {app.QUEUE_MAX_SIZE} waiting, then more")
            result["queue"] = queue_check(server.url, app.TRAINING_CONCURRENCY, app.QUEUE_MAX_SIZE, log=log)
        result["server_alive_at_end"] = server.proc.poll() is None
        result["server_tracebacks"] = sum("Traceback" in line for line in server.log)
    record.finish(result)
    result["wall_s"] = time.time() - t_start
    result["sessions"] = latency_summary(sessions)
    result["trainings"] = latency_summary(trainings)
    result["memory"] = dict(
        memory_verdict(samples, args.sample_every, args.threshold_mb),
        samples=samples,
        rss_at_start_mb=result.pop("memory_at_start_mb"),
        rss_after_compile_run_mb=result.pop("memory_after_compile_run_mb"),
        carry_mb=carry_mb(args.episodes),
        carry_note="bytes of one run's initial training state at this config (params, "
        "optimizer state, knobs): what a leak of one run's state per training adds",
    )
    result["own_data"] = own_data(sessions, trainings, args.sessions)
    result["per_training"] = [
        {k: r.get(k) for k in ("training", "config", "seed", "eta", "ok", "error", "total_s", "signature", "q_error")}
        for r in trainings
    ]
    result["per_session"] = [
        {
            k: r.get(k)
            for k in (
                "session",
                "seed",
                "eta",
                "ok",
                "error",
                "first_update_s",
                "first_data_s",
                "total_s",
                "signature",
                "q_error",
            )
        }
        for r in sessions
    ]
    q_ok = result.get("queue", {}).get("ok", True)
    result["ok"] = (
        result["compile_run"]["ok"]
        and result["sessions"]["errors"] == 0
        and result["trainings"]["errors"] == 0
        and result["own_data"]["ok"]
        and result["memory"]["ok"]
        and q_ok
        and result["server_alive_at_end"]
        and result["server_tracebacks"] == 0
    )
    return result


def main(argv=None):
    try:
        args = parse_args(argv)
    except UsageError as e:
        print(f"demo_load: error: {e}", file=sys.stderr)
        return 2
    from benchmarks import record

    result = run(args)
    print()
    print(table(result))
    print(f"\nown data: {result['own_data']}")
    record.write("demo_load", result, args.out)
    print(f"wrote {args.out} · {'PASS' if result['ok'] else 'FAIL'}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
