"""The "Paper results" tab: our reproduced numbers (``results/``, via :mod:`tpo_core.report`) beside the
paper's published ones. Without reproduced results it says so and shows only the paper's tables,
labelled as the paper's."""
from __future__ import annotations

import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]

PAPER_TABLES = """\
### The paper's published numbers (Kaddour 2026, *Target Policy Optimization*, §5 — not produced by this app)

**Table 3** — final exact-match error %, terminal reward, reverse copy, V = 2, K = 8, B = 100, 2000 episodes,
20 seeds (P = prompt-matched, I = interaction-matched; "−" = above 95 %):

| method | P H7 | P H8 | P H9 | P H10 | I H7 | I H8 | I H9 | I H10 |
|---|---|---|---|---|---|---|---|---|
| TPO | 6.9 | 8.6 | 6.1 | 7.4 | 1.8 | 2.8 | 5.3 | 19.0 |
| GRPO | 14.5 | 27.6 | 30.0 | 50.4 | 9.6 | 23.2 | 36.2 | 48.7 |
| GRPO (no KL) | 66.6 | 92.5 | − | − | 78.1 | 83.8 | − | − |
| PPO | 12.0 | 26.3 | 90.6 | − | 38.6 | 62.1 | 66.2 | − |
| DG | 33.8 | 58.8 | − | − | 47.7 | 69.4 | − | − |

**Table 1** — episodes to 1 % error, dense bag-of-tokens reverse copy, H = 10, K = 8, 20 seeds:

| method | V=2 | V=4 | V=8 | V=16 |
|---|---|---|---|---|
| TPO_token | 58 | 74 | 103 | 102 |
| GRPO_token | 904 | 141 | 124 | 148 |
| DG | 199 | 273 | 314 | 393 |
| PPO | 872 | 181 | 191 | 259 |

**Table 2** — episodes to 1 %, H = 10, V = 2, K = 8, 10 seeds ("−": never within 1000 episodes):

| reward | target | TPO_token | GRPO_token | DG | PPO |
|---|---|---|---|---|---|
| bag | copy | 81 | 338 | 219 | 170 |
| bag | flip | 56 | 104 | 201 | 146 |
| bag | rev copy | 55 | 352 | 202 | − |
| bag | rev flip | 59 | 209 | 200 | 143 |
| sequential | copy | 295 | − | 439 | − |
| sequential | flip | 321 | − | 349 | − |
| sequential | rev copy | 159 | − | 515 | − |
| sequential | rev flip | 276 | − | 309 | − |

**MNIST contextual bandit** — final greedy test error after 10,000 steps, 20 seeds: TPO 2.9 %, DG ≈ 3.2 %,
PG 5.3 %, GRPO 5.9 %, Group PG 7.2 %.
"""


def results_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("TPO_RESULTS_DIR", ROOT / "results"))


def load_report(directory=None):
    """(markdown of the reproduced results, None) or (None, reason they are missing)."""
    directory = pathlib.Path(directory) if directory else results_dir()
    if not directory.is_dir():
        return None, f"No reproduced results yet: `{directory.name}/` does not exist."
    try:
        from tpo_core import report
    except ImportError:
        return None, "No reproduced results yet: `tpo_core.report` is not available in this checkout."
    try:
        summaries = report.load_summaries(directory)
    except ValueError as e:  # no summary.json anywhere below the folder
        return None, f"No reproduced results yet ({e})."
    except Exception as e:  # a half-written results folder must not take the tab down
        return None, f"Could not read the reproduced results in `{directory.name}/`: {e}"
    try:
        return report.to_markdown(summaries), None
    except Exception as e:
        return None, f"Could not render the reproduced results: {e}"


def figure_files(directory=None) -> list:
    """The presets' self-contained plotly pages (``results/<preset>/figure.html``), by preset name."""
    directory = pathlib.Path(directory) if directory else results_dir()
    if not directory.is_dir():
        return []
    return sorted(directory.rglob("figure.html"))


def figure_iframe(path) -> str:
    """An iframe showing one figure page, served by Gradio from the allowed results folder."""
    if not path:
        return ""
    import html

    p = pathlib.Path(path).resolve()
    return (f'<iframe src="/gradio_api/file={html.escape(str(p))}" style="width:100%;height:560px;border:0" '
            f'title="{html.escape(p.parent.name)}"></iframe>')
