"""Render reproduction summaries (``summary.json`` files) as one markdown or HTML report.

    python -m tpo_core report results --out results/REPORT.md

Each row is a verdict that can fail (see :mod:`tpo_core.lab.reproduce.stats`): *consistent*, *inconsistent* or
*inconclusive*, and only for runs at the paper's own setting; a smaller budget shows "no paper number at
this setting". One renderer for every experiment, JAX or LLM: what differs between them (the claim's current
wording, the metrics' names, the rows, what trained the runs) comes from the summary's experiment in the
registry (:mod:`tpo_core.reproduce.experiments`, by the summary's ``preset`` name), and the report is walked
once (:func:`blocks`) into markdown or HTML. Public functions (the book and the demo call them):
:func:`load_summaries`, :func:`to_markdown`, :func:`to_html`, :func:`reference_table`, :func:`seedwise_table`.
"""

from __future__ import annotations

import html
import json
import math
import pathlib

from .reproduce import experiments

HEADER = ["run", "metric", "ours ± SE", "paper ± SE", "δ", "verdict", "seeds × length"]


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
        if not isinstance(s, dict) or "preset" not in s or "rows" not in s:
            raise ValueError(
                f"{p}: not a reproduction summary (no 'preset' and 'rows'); rerun its preset with --partial"
            )
        s["_path"] = str(p.relative_to(directory))
        notes = p.parent / "NOTES.md"
        if notes.exists():
            s["findings"] = notes.read_text().strip()
        summaries.append(s)
    order = {name: i for i, name in enumerate(experiments.names())}  # the registry's order: JAX, then LLM
    return sorted(summaries, key=lambda s: (order.get(s["preset"], len(order)), s["budget"]))


def _fmt(value, metric) -> str:
    if value is None:
        return "never" if metric == "steps_to_1pct" else ""
    if metric == "steps_to_1pct":
        return f"{value:.0f}"
    return f"{value:.3f}" if metric.endswith("_reward") else f"{value:.2f}"


def _fmt_se(se, metric) -> str:
    if se is None or not math.isfinite(se):
        return "n/a"
    if metric.endswith("_reward"):
        return f"{se:.3f}"
    return f"{se:.0f}" if metric == "steps_to_1pct" else f"{se:.2f}"


class _Unregistered:
    """How a summary of an experiment this package no longer has reads: its own claim, metric keys, no notes."""

    def __init__(self, summary: dict):
        self.claim = summary["claim"]

    def metric_label(self, metric: str) -> str:
        return metric

    def rows(self, summary: dict) -> list[dict]:
        return experiments.labelled_rows(summary, self.metric_label)

    def notes(self, summary: dict) -> str:
        return "an experiment this package no longer has"


def experiment_of(summary: dict):
    """The registry's experiment of a summary (by its ``preset`` name): it says what differs between experiments
    (its current claim, its metrics' names, its rows, what trained it)."""
    return experiments.find(summary.get("preset")) or _Unregistered(summary)


def _partial_text(s) -> str:
    """' (in progress: ...)' for a summary of a reproduction whose seeds are not all finished."""
    if not s.get("partial"):
        return ""
    return (
        " (in progress: "
        + ", ".join(
            f"{r['key']} {len(r['seeds'])} seed{'s' * (len(r['seeds']) != 1)}"
            for r in s["rows"]
            if r["metric"] == s["metrics"][0]
        )
        + " so far)"
    )


def row_cells(r: dict) -> list[str]:
    """One row of :meth:`Experiment.rows <tpo_core.lab.reproduce.experiments.Experiment.rows>` as table cells."""
    metric = r["metric"]
    if not r.get("comparable", False):
        paper, delta, verdict = "no paper number at this setting", "", "—"
    else:
        paper = r.get("paper_text") or "—"
        if r.get("paper_se") is not None:
            paper += f" ± {_fmt_se(r['paper_se'], metric)}"
        delta = "" if r.get("resolution") is None else f"{r['resolution']:g}"
        verdict = r.get("verdict") or ("no SE (one seed)" if r.get("paper") is not None else "—")
    return [
        r["key"],
        r.get("metric_label", metric),
        f"{_fmt(r['ours'], metric)} ± {_fmt_se(r['se'], metric)}",
        paper,
        delta,
        verdict,
        f"{len(r['seeds'])} × {r['length']}",
    ]


def counts(summaries) -> dict:
    """How many rows are real comparisons (the paper's setting, a paper number, a verdict), by verdict."""
    rows = [r for s in summaries for r in s["rows"]]
    judged = [r for r in rows if r.get("comparable") and r.get("verdict")]
    out = {"rows": len(rows), "compared": len(judged)}
    for v in ("consistent", "inconsistent", "inconclusive"):
        out[v] = sum(r["verdict"] == v for r in judged)
    return out


def headline(summaries) -> str:
    c = counts(summaries)
    return (
        f"{len(summaries)} preset run(s), {c['rows']} rows, of which {c['compared']} ran at the paper's own "
        f"setting and are compared with its number: {c['consistent']} consistent, {c['inconsistent']} "
        f"inconsistent, {c['inconclusive']} inconclusive. The other rows ran smaller budgets (see each budget "
        f"note) and are not scored."
    )


def reference_table(ref: dict) -> list[str]:
    """Markdown lines: ours against the reference implementation's own per-seed curves."""
    lines = [
        f"Ours against the reference implementation's own per-seed curves (Table 3, P, H=10); tests: {ref['test']}.",
        "",
    ]
    head = [
        "method",
        "seeds (ours / ref)",
        "final error % (ours / ref)",
        "Δ 95% CI",
        "p",
        "verdict",
        f"steps to {100 * ref['steps_threshold']:.0f}% (ours / ref)",
        "Δ 95% CI",
        "p",
        "verdict",
    ]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m, d in ref["methods"].items():
        f, s = d["final_test"], d["steps_test"]
        ci = lambda t: "n/a" if t["ci"] is None else f"[{t['ci'][0]:.1f}, {t['ci'][1]:.1f}]"  # noqa: E731
        pv = lambda t: "n/a" if t["p_value"] is None else f"{t['p_value']:.3f}"  # noqa: E731
        lines.append(
            "| "
            + " | ".join(
                [
                    m,
                    f"{d['n_ours']} / {d['n_ref']}",
                    f"{d['final_ours']:.1f} ± {_fmt_se(d['final_ours_se'], 'final')} / {d['final_ref']:.1f} ± "
                    f"{_fmt_se(d['final_ref_se'], 'final')}",
                    ci(f),
                    pv(f),
                    f["verdict"] + f" (δ {f['resolution']:.1f})" if "resolution" in f else f["verdict"],
                    f"{d['steps_ours']:.0f} / {d['steps_ref']:.0f}",
                    ci(s),
                    pv(s),
                    s["verdict"] + f" (δ {s['resolution']:.0f})" if "resolution" in s else s["verdict"],
                ]
            )
            + " |"
        )
    return lines + [""]


def _seedwise_side(d: dict, side: str, key: str) -> str:
    """'mean (median)' of one side of one statistic of :func:`tpo_core.lab.reproduce.seedwise.compare`."""
    mean, median = d[f"mean_{side}"], d[f"median_{side}"]
    if key == "steps":
        never = d[f"never_{side}"]
        return f"median {'never' if median is None else f'{median:.0f}'}, mean {mean:.0f}" + (
            f" ({never} never: counted at T)" if never else ""
        )
    return f"mean {mean:.1f}, median {median:.1f}"


def seedwise_table(sw: dict, column: str = "") -> list[str]:
    """Markdown lines: the seed-by-seed comparisons of Table 3's runs (:mod:`tpo_core.lab.reproduce.seedwise`; H = 10
    unless ``column`` names another, e.g. "H = 7"), one row per statistic, the verdict of its rule in each
    comparison's first row, then what became of the seeds."""
    from .reproduce.seedwise import STATISTICS

    lines = [
        f"Seed by seed{f' at {column}' if column else ''} (`tpo_core.lab.reproduce.seedwise`): per seed, the late-phase mean error (second half of the run), "
        "the final error (last 10 episodes), the steps to 10 % error and whether it ever solved (below 5 %); "
        "permutation test of equal means and two-sided Mann-Whitney rank test for the first three, Fisher's "
        f"exact test on the never-solved counts. Rule: {sw['rule']}.",
        "",
    ]
    head = [
        "comparison (A vs B)",
        "seeds A / B",
        "statistic",
        "A",
        "B",
        "permutation p",
        "rank p / Fisher p",
        "verdict",
    ]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, c in sw["comparisons"].items():
        st = c["statistics"]
        for i, key in enumerate(("late", "final", "steps", "solved")):
            d = st[key]
            if key == "solved":
                a, b = f"{d['never_a']} of {c['n'][0]}", f"{d['never_b']} of {c['n'][1]}"
                perm, rank = "", f"{d['fisher_p']:.3g} (Fisher)"
            else:
                a, b = _seedwise_side(d, "a", key), _seedwise_side(d, "b", key)
                perm, rank = f"{d['perm_p']:.3g}", f"{d['rank_p']:.3g}"
            verdict = f"**{c['verdict']}** ({c['reason']})" if i == 0 else ""
            cells = [
                label if i == 0 else "",
                f"{c['n'][0]} / {c['n'][1]}" if i == 0 else "",
                STATISTICS[key],
                a,
                b,
                perm,
                rank,
                verdict,
            ]
            lines.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    lines.append("")
    parts = [
        f"{side} {m}: {o['never_solved']} never solved, {o['relapsed']} of {o['solved']} solved seeds back above "
        f"50 % later, {o['ends_relapsed']} still at 10 % or more at the end (of {o['n']})"
        for side, ms in sw.get("outcomes", {}).items()
        for m, o in ms.items()
    ]
    if parts:
        lines += ["What became of the seeds — " + "; ".join(parts) + ".", ""]
    return lines


VERDICT_RULE = [
    (
        "Verdict rule: the 95% interval of (ours − paper), from our seed SE and the paper's where its seeds "
        "are known, must lie inside ±δ to be ",
        "",
    ),
    ("consistent", "i"),
    ("; it is ", ""),
    ("inconsistent", "i"),
    (" when it lies entirely outside ±δ; otherwise ", ""),
    ("inconclusive", "i"),
    (
        " (too few seeds for the effect). δ is the effect the comparison must resolve "
        "(Table 3: half the paper's TPO–GRPO gap in that column).",
        "",
    ),
]


def blocks(summaries: list[dict], command: str | None = None) -> list[tuple]:
    """The report, walked once, as blocks that :func:`to_markdown` and :func:`to_html` both write:
    ``("h", level, spans)``, ``("p", spans)``, ``("table", header, rows of cells, verdict class per row)`` and
    ``("md", markdown lines)`` (a table already in markdown). A span is ``(text, style)``, style ``""``, ``"b"``
    (bold), ``"i"`` (italic) or ``"code"``. What differs between experiments comes from the registry
    (:func:`experiment_of`)."""
    if isinstance(summaries, dict):
        summaries = [summaries]
    out = [("h", 1, [("Reproduction report", "")])]
    if command:
        out.append(("p", [("Produced by ", ""), (command, "code"), (" from the summaries below.", "")]))
    out += [("p", [(headline(summaries), "")]), ("p", VERDICT_RULE)]
    for s in summaries:
        experiment = experiment_of(s)
        out += [
            (
                "h",
                2,
                [
                    (f"{s['title']} — ", ""),
                    (s["preset"], "code"),
                    (", budget ", ""),
                    (s["budget"], "code"),
                    (_partial_text(s), ""),
                ],
            ),
            ("p", [("Paper's claim.", "b"), (f" {experiment.claim}", "")]),
            (
                "p",
                [
                    ("Paper's setting.", "b"),
                    (f" {s['paper_setting']}. ", ""),
                    ("This run.", "b"),
                    (f" {s['budget_note']}.", ""),
                ],
            ),
            (
                "p",
                [
                    ("Command.", "b"),
                    (" ", ""),
                    (s["command"], "code"),
                    (
                        f" — {s.get('train_seconds', 0):.0f} s of training on {s.get('devices', 1)} device(s); "
                        f"{experiment.notes(s)}.",
                        "",
                    ),
                ],
            ),
        ]
        if s.get("data_source"):
            out.append(("p", [("Data.", "b"), (f" {s['data_source']}", "")]))
        rows = experiment.rows(s)
        out.append(
            (
                "table",
                HEADER,
                [row_cells(r) for r in rows],
                [r.get("verdict") if r.get("comparable") else None for r in rows],
            )
        )
        if "order" in s:
            o = s["order"]
            out.append(
                (
                    "p",
                    [
                        (
                            f"Order by final error — ours: {' < '.join(o['ours'])}; paper: {' < '.join(o['paper'])} "
                            f"(Kendall τ over the paper's methods = {o['kendall_tau']:.2f}).",
                            "",
                        )
                    ],
                )
            )
        if "reference" in s:
            out.append(("md", reference_table(s["reference"])))
        if "seedwise" in s:
            out.append(("md", seedwise_table(s["seedwise"])))
        if "seedwise_h7" in s:
            out.append(("md", seedwise_table(s["seedwise_h7"], "H = 7")))
        if s.get("findings"):
            out.append(("p", [("Findings.", "b"), (" " + s["findings"], "")]))
    return out


_MD = {"": "{}", "b": "**{}**", "i": "*{}*", "code": "`{}`"}
_HTML = {"": "{}", "b": "<b>{}</b>", "i": "<i>{}</i>", "code": "<code>{}</code>"}


def to_markdown(summaries: list[dict], command: str | None = None) -> str:
    """One markdown document: per experiment, the claim, the budget, the command and a comparison table."""
    spans = lambda sp: "".join(_MD[style].format(text) for text, style in sp)  # noqa: E731
    lines = []
    for block in blocks(summaries, command):
        if block[0] == "h":
            lines += ["#" * block[1] + " " + spans(block[2]), ""]
        elif block[0] == "p":
            lines += [spans(block[1]), ""]
        elif block[0] == "table":
            _, header, rows, _ = block
            lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" for cells in rows] + [""]
        else:
            lines += block[1]
    return "\n".join(lines)


def to_html(summaries: list[dict], command: str | None = None) -> str:
    """The same content as :func:`to_markdown` (the same :func:`blocks`) as a standalone HTML page."""
    e = html.escape
    spans = lambda sp: "".join(_HTML[style].format(e(text, quote=False)) for text, style in sp)  # noqa: E731
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>TPO reproduction report</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px}td.inconsistent{color:#b00;font-weight:bold}</style>"
        "</head><body>",
    ]
    for block in blocks(summaries, command):
        if block[0] == "h":
            parts.append(f"<h{block[1]}>{spans(block[2])}</h{block[1]}>")
        elif block[0] == "p":
            parts.append(f"<p>{spans(block[1])}</p>")
        elif block[0] == "table":
            _, header, rows, verdicts = block
            parts.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>")
            for cells, verdict in zip(rows, verdicts):
                parts.append(
                    "<tr>"
                    + "".join(
                        f"<td class='{e(verdict)}'>{e(c)}</td>" if i == 5 and verdict else f"<td>{e(c)}</td>"
                        for i, c in enumerate(cells)
                    )
                    + "</tr>"
                )
            parts.append("</table>")
        else:
            parts.append("<pre>" + e("\n".join(block[1])) + "</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _cell(v) -> str:
    from .reproduce.stats import paper_text

    if isinstance(v, float):
        return f"{v:.1f}"
    return paper_text(v)


def paper_tables_markdown() -> str:
    """The paper's Tables 1–3 and the MNIST numbers as markdown, rendered from
    :mod:`tpo_core.lab.reproduce.paper_numbers` (the one copy)."""
    from tpo_core.constants import DENSE_REWARDS, TARGETS
    from tpo_core.methods import get as method

    from .reproduce import paper_numbers as P

    title = lambda m: method(m).title  # noqa: E731
    cols3 = [(s, H) for s in "PI" for H in (7, 8, 9, 10)]
    t3 = ["| method | " + " | ".join(f"{s} H{H}" for s, H in cols3) + " |", "|---" * (len(cols3) + 1) + "|"]
    t3 += [
        f"| {title(m)} | " + " | ".join(_cell(P.TABLE3[(m, H, s)]) for s, H in cols3) + " |" for m in P.TABLE3_METHODS
    ]
    vs = (2, 4, 8, 16)
    t1 = ["| method | " + " | ".join(f"V={v}" for v in vs) + " |", "|---" * (len(vs) + 1) + "|"]
    t1 += [f"| {title(m)} | " + " | ".join(_cell(P.TABLE1[(m, v)]) for v in vs) + " |" for m in P.TABLE1_METHODS]
    ms = P.TABLE1_METHODS
    t2 = ["| reward | target | " + " | ".join(title(m) for m in ms) + " |", "|---" * (len(ms) + 2) + "|"]
    t2 += [
        f"| {r} | {t.replace('_', ' ')} | " + " | ".join(_cell(P.TABLE2[(m, r, t)]) for m in ms) + " |"
        for r in DENSE_REWARDS
        for t in TARGETS
    ]
    mnist = ", ".join(f"{title(m)} {P.mnist_text(m)}" for m, _ in sorted(P.MNIST.items(), key=lambda kv: kv[1]))
    return "\n".join(
        [
            "### The paper's published numbers (Kaddour 2026, *Target Policy Optimization*, §3.3–§3.6 — not produced by this app)",
            "",
            "**Table 3** — final exact-match error %, terminal reward, reverse copy, V = 2, K = 8, B = 100, 2000 "
            'episodes, 20 seeds (P = prompt-matched, I = interaction-matched; "−" = above 95 %):',
            "",
            *t3,
            "",
            "**Table 1** — episodes to 1 % error, dense bag-of-tokens reverse copy, H = 10, K = 8, 20 seeds:",
            "",
            *t1,
            "",
            '**Table 2** — episodes to 1 %, H = 10, V = 2, K = 8, 10 seeds ("−": never within 1000 episodes):',
            "",
            *t2,
            "",
            f"**MNIST contextual bandit** (§3.3, Fig. 4) — final greedy test error after 10,000 steps, 20 seeds: {mnist}.",
            "",
        ]
    )
