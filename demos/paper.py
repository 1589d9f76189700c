"""The "Paper results" tab: our reproduced numbers (``results/``, via :mod:`tpo_core.lab.report`) beside the
paper's published ones. Without reproduced results it says so and shows only the paper's tables,
labelled as the paper's."""

from __future__ import annotations

import os
import pathlib

from tpo_core.lab import report

ROOT = pathlib.Path(__file__).resolve().parents[1]

PAPER_TABLES = report.paper_tables_markdown()


def results_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("TPO_RESULTS_DIR", ROOT / "results"))


def load_report(directory=None):
    """(markdown of the reproduced results, None) or (None, reason they are missing)."""
    directory = pathlib.Path(directory) if directory else results_dir()
    if not directory.is_dir():
        return None, f"No reproduced results yet: `{directory.name}/` does not exist."
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
    return (
        f'<iframe src="/gradio_api/file={html.escape(str(p))}" style="width:100%;height:560px;border:0" '
        f'title="{html.escape(p.parent.name)}"></iframe>'
    )
