"""Render reproduction summaries as one markdown or HTML report, and compare our Table-3 curves with the
reference code's own per-seed curves.

    python -m tpo_core report results --out results/REPORT.md

Public functions (the book and the demo call them): :func:`load_summaries`, :func:`to_markdown`,
:func:`to_html`, :func:`compare_reference`.
"""
from __future__ import annotations

import html
import json
import math
import os
import pathlib

import numpy as np

REFERENCE_NAME = "token_reversal_sparse_reward_results.npz"
CHECKPOINTS = (200, 500, 1000, 1500)
SOLVED = 0.01          # a seed counts as solved when its final error is below 1%


def default_reference_path() -> pathlib.Path:
    """``$TPO_REFERENCE_NPZ``, else ``../shared/reference/<file>`` beside the repository (not part of it)."""
    env = os.environ.get("TPO_REFERENCE_NPZ")
    if env:
        return pathlib.Path(env)
    return pathlib.Path(__file__).resolve().parents[2] / "shared" / "reference" / REFERENCE_NAME


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------
def load_summaries(directory) -> list[dict]:
    """Every ``summary.json`` under ``directory`` (recursively), sorted by preset name then budget; a
    ``NOTES.md`` beside a summary (findings written by a person) is attached as ``findings``."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        raise ValueError(f"directory {str(directory)!r} does not exist")
    paths = sorted(directory.rglob("summary.json"))
    if not paths:
        raise ValueError(f"directory {str(directory)!r} holds no summary.json")
    summaries = []
    for p in paths:
        s = json.loads(p.read_text())
        s["_path"] = str(p)
        notes = p.parent / "NOTES.md"  # a human's findings about this preset, shown under its table
        if notes.exists():
            s["findings"] = notes.read_text().strip()
        summaries.append(s)
    from .experiments import PRESETS
    order = {name: i for i, name in enumerate(PRESETS)}
    return sorted(summaries, key=lambda s: (order.get(s["preset"], 99), s["budget"]))


# --------------------------------------------------------------------------------------------
# formatting
# --------------------------------------------------------------------------------------------
def _fmt(value, metric) -> str:
    if value is None:
        return "never" if metric == "steps_to_1pct" else ""
    if metric == "steps_to_1pct":
        return f"{value:d}" if isinstance(value, int) else f"{value:.0f}"
    return f"{value:.2f}"


def _fmt_se(se, metric) -> str:
    if se is None or not math.isfinite(se):
        return "n/a"
    return f"{se:.0f}" if metric == "steps_to_1pct" else f"{se:.2f}"


def _verdict(row, comparable: bool) -> str:
    a = row.get("agree")
    if a is None:
        return "—"
    text = "yes" if a else "**no**"
    return text if comparable else text + " (other setting)"


def _rows(summary) -> list[list[str]]:
    from .experiments import METRICS
    out = []
    for r in summary["rows"]:
        out.append([r["key"], METRICS.get(r["metric"], r["metric"]),
                    f"{_fmt(r['ours'], r['metric'])} ± {_fmt_se(r['se'], r['metric'])}",
                    r.get("paper_text") or "", _verdict(r, summary.get("comparable", False)),
                    f"{len(r['seeds'])} × {r['length']}"])
    return out


HEADER = ["run", "metric", "ours ± SE", "paper", "within 2 SE", "seeds × length"]


def _counts(summaries) -> tuple[int, int, int]:
    rows = [r for s in summaries for r in s["rows"] if r.get("agree") is not None]
    return len(rows), sum(bool(r["agree"]) for r in rows), sum(1 for s in summaries for r in s["rows"])


def _reference_lines(ref: dict) -> list[str]:
    lines = ["Comparison with the reference code's own per-seed curves (Table 3, P, H=10), seed mean ± SE in %:", ""]
    head = ["method"] + [f"ep {e}" for e in ref["checkpoints"]] + ["final", "solved (ours / ref)", "Welch p", "verdict"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m, d in ref["methods"].items():
        cells = [m]
        for cp in d["checkpoints"]:
            ours = "n/a" if cp["ours"] is None else f"{100 * cp['ours']:.1f}±{100 * cp['ours_se']:.1f}"
            cells.append(f"{ours} / {100 * cp['ref']:.1f}±{100 * cp['ref_se']:.1f}")
        cells.append(f"{100 * d['final_ours']:.1f} / {100 * d['final_ref']:.1f}")
        cells.append(f"{d['solved_ours']:.2f} / {d['solved_ref']:.2f}")
        cells.append("n/a" if d["p_value"] is None else f"{d['p_value']:.3f}")
        cells.append(d["verdict"])
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def to_markdown(summaries: list[dict], command: str | None = None) -> str:
    """One markdown document: per preset, the claim, the budget, the command and a comparison table."""
    if isinstance(summaries, dict):
        summaries = [summaries]
    n, agree, total = _counts(summaries)
    lines = ["# Reproduction report", ""] + ([f"Produced by `{command}` from the summaries below.", ""] if command else []) + [
             f"{len(summaries)} preset(s), {total} rows; {agree} of {n} rows with a paper number and a seed SE "
             f"agree with the paper within 2 standard errors. Rows marked *(other setting)* ran a smaller budget "
             f"than the paper (see each budget note), so their comparison is indicative only.", ""]
    for s in summaries:
        lines += [f"## {s['title']} — `{s['preset']}`, budget `{s['budget']}`", "",
                  f"**Paper's claim.** {s['claim']}", "",
                  f"**Paper's setting.** {s['paper_setting']}. **This run.** {s['budget_note']}.", "",
                  f"**Command.** `{s['command']}` — {s.get('train_seconds', 0):.0f} s of training on "
                  f"{s.get('devices', 1)} device(s).", ""]
        if s.get("data_source"):
            lines += [f"**Data.** {s['data_source']}", ""]
        lines += ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in _rows(s)]
        lines.append("")
        if "order" in s:
            o = s["order"]
            lines += [f"Order by final error — ours: {' < '.join(o['ours'])}; paper: {' < '.join(o['paper'])} "
                      f"(Kendall τ over the paper's methods = {o['kendall_tau']:.2f}).", ""]
        if "reference" in s:
            lines += _reference_lines(s["reference"])
        if s.get("findings"):
            lines += ["**Findings.** " + s["findings"], ""]
    return "\n".join(lines)


def to_html(summaries: list[dict]) -> str:
    """The same content as :func:`to_markdown` as a standalone HTML page."""
    if isinstance(summaries, dict):
        summaries = [summaries]
    e = html.escape
    n, agree, total = _counts(summaries)
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>TPO reproduction report</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:3px 8px}td.no{color:#b00;font-weight:bold}</style></head><body>",
             "<h1>Reproduction report</h1>",
             f"<p>{len(summaries)} preset(s), {total} rows; {agree} of {n} rows with a paper number and a seed SE agree "
             f"with the paper within 2 standard errors.</p>"]
    for s in summaries:
        parts += [f"<h2>{e(s['title'])} — <code>{e(s['preset'])}</code>, budget <code>{e(s['budget'])}</code></h2>",
                  f"<p><b>Paper's claim.</b> {e(s['claim'])}</p>",
                  f"<p><b>Paper's setting.</b> {e(s['paper_setting'])}. <b>This run.</b> {e(s['budget_note'])}.</p>",
                  f"<p><b>Command.</b> <code>{e(s['command'])}</code></p>",
                  "<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in HEADER) + "</tr>"]
        for row in _rows(s):
            cells = []
            for i, c in enumerate(row):
                cls = " class='no'" if i == 4 and "no" in c and c != "—" else ""
                cells.append(f"<td{cls}>{e(c.replace('**', ''))}</td>")
            parts.append("<tr>" + "".join(cells) + "</tr>")
        parts.append("</table>")
        if "order" in s:
            o = s["order"]
            parts.append(f"<p>Order by final error — ours: {e(' < '.join(o['ours']))}; paper: "
                         f"{e(' < '.join(o['paper']))} (Kendall τ {o['kendall_tau']:.2f}).</p>")
        if "reference" in s:
            parts.append("<pre>" + e("\n".join(_reference_lines(s["reference"]))) + "</pre>")
        if s.get("findings"):
            parts.append(f"<p><b>Findings.</b> {e(s['findings'])}</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------
# the reference code's own curves (Table 3, prompt-matched, H = 10)
# --------------------------------------------------------------------------------------------
def load_reference(path=None) -> dict:
    """{"tpo": [20, 2000], "grpo": ..., "dg": ...} from the reference NPZ (errors in [0, 1])."""
    path = pathlib.Path(path) if path is not None else default_reference_path()
    if not path.exists():
        raise ValueError(f"reference file {str(path)!r} not found")
    with np.load(path) as f:
        return {k[: -len("_errors")]: np.asarray(f[k], float) for k in f.files if k.endswith("_errors")}


def _our_curves(ours) -> dict:
    """Accept {method: curves [S, T]}, an NPZ written by ``reproduce`` or a table3 results folder."""
    if isinstance(ours, dict):
        return {m: np.asarray(c, float) for m, c in ours.items()}
    path = pathlib.Path(ours)
    if path.is_dir():
        out = {}
        for m in ("tpo", "grpo", "dg"):
            f = path / f"{m}_H_10_P.npz"
            if f.exists():
                with np.load(f) as z:
                    out[m] = np.asarray(z["curve_error"], float)
        if not out:
            raise ValueError(f"{str(path)!r} holds no Table-3 P H=10 curves (tpo_H_10_P.npz, ...)")
        return out
    if path.suffix == ".npz" and path.exists():
        with np.load(path) as z:
            method = json.loads(str(z["config"]))["method"] if "config" in z.files else path.stem.split("_")[0]
            return {method: np.asarray(z["curve_error"] if "curve_error" in z.files else z[f"{method}_errors"], float)}
    raise ValueError(f"ours must be a dict of curves, a reproduce NPZ or a results folder, got {ours!r}")


def _mean_se(x):
    x = np.asarray(x, float)
    se = x.std(ddof=1) / math.sqrt(len(x)) if len(x) > 1 else float("nan")
    return float(x.mean()), float(se)


def compare_reference(ours, path=None, checkpoints=CHECKPOINTS) -> dict:
    """Compare our per-seed error curves with the reference code's: seed means ± SE at the checkpoints
    and the final episode, the fraction of seeds solved (final error < 1%), and a two-sample Welch t-test
    on the final per-seed errors. Verdict "consistent" when p ≥ 0.05 (or, with a single seed of ours,
    when our value lies within 2 reference SEs of the reference mean)."""
    from scipy import stats

    mine, ref = _our_curves(ours), load_reference(path)
    methods = {}
    for m, c in mine.items():
        if m not in ref:
            continue
        r = ref[m]
        if c.ndim != 2:
            raise ValueError(f"curves for {m!r} must be [seeds, episodes], got shape {c.shape}")
        cps = []
        for e in tuple(checkpoints):
            rm, rse = _mean_se(r[:, e])
            om, ose = _mean_se(c[:, e]) if e < c.shape[1] else (None, None)
            cps.append(dict(episode=e, ours=om, ours_se=ose, ref=rm, ref_se=rse))
        final_o, final_r = c[:, -1], r[:, min(c.shape[1], r.shape[1]) - 1]
        fo, fo_se = _mean_se(final_o)
        fr, fr_se = _mean_se(final_r)
        p = None
        if len(final_o) > 1 and (final_o.std() > 0 or final_r.std() > 0):
            p = float(stats.ttest_ind(final_o, final_r, equal_var=False).pvalue)
        elif len(final_o) > 1:
            p = 1.0 if fo == fr else 0.0
        consistent = (p >= 0.05) if p is not None else abs(fo - fr) <= 2 * fr_se
        methods[m] = dict(checkpoints=cps, final_episode=int(c.shape[1] - 1), final_ours=fo, final_ours_se=fo_se,
                          final_ref=fr, final_ref_se=fr_se, solved_ours=float((final_o < SOLVED).mean()),
                          solved_ref=float((final_r < SOLVED).mean()), p_value=p, n_ours=int(len(final_o)),
                          n_ref=int(len(final_r)), verdict="consistent" if consistent else "different")
    if not methods:
        raise ValueError(f"no method in common with the reference (ours: {sorted(mine)}, reference: {sorted(ref)})")
    return dict(checkpoints=list(checkpoints), methods=methods)


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------
def add_subcommand(sub) -> None:
    p = sub.add_parser("report", help="render reproduction summaries as one markdown/HTML table")
    p.add_argument("directory", help="folder holding summary.json files (searched recursively)")
    p.add_argument("--out", default=None, help="REPORT.md or REPORT.html (default: print markdown)")
    p.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    from . import results
    if args.out is not None and pathlib.Path(args.out).suffix not in (".md", ".html"):
        raise ValueError(f"out must end in .md or .html, got {args.out!r}")
    summaries = load_summaries(args.directory)
    if args.out is None:
        print(to_markdown(summaries))
        return 0
    command = f"python -m tpo_core report {args.directory} --out {args.out}"
    text = to_html(summaries) if args.out.endswith(".html") else to_markdown(summaries, command=command)
    results.write_text(args.out, text)
    print(f"wrote {args.out} ({len(summaries)} summaries)")
    return 0
