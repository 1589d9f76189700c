"""The reproduction runs committed under ``results/``, read back for the book's chapters.

:func:`find_results` locates the folder (``$TPO_RESULTS_DIR``, else ``results/`` in the working directory
or one of its parents); :func:`load_runs` reads one preset folder: whole runs (``<run>.npz``, all seeds)
and per-seed runs (``<run>.seeds/seed_<s>.npz``, concatenated in seed order, however many seeds exist so
far, all of one configuration and engine version, else ValueError); :func:`load_summary` reads its ``summary.json``. Nothing is retrained.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
from typing import Optional

import numpy as np


@dataclasses.dataclass(frozen=True)
class CommittedRun:
    """One committed run: ``curves`` {metric: [S, T]}, the seeds in that order, its configuration and the
    training info of each file (seconds, devices, engine)."""

    name: str
    curves: dict
    seeds: tuple
    config: dict
    infos: tuple

    @property
    def n_seeds(self) -> int:
        return len(self.seeds)

    @property
    def length(self) -> int:
        return int(next(iter(self.curves.values())).shape[1])

    @property
    def seconds(self) -> float:
        """Training seconds of all its seeds together, as recorded when it ran."""
        return float(sum(i.get("seconds", 0.0) for i in self.infos))


def find_results(start=None) -> Optional[pathlib.Path]:
    """The repository's ``results/`` folder, or None where there is none (e.g. a pip-installed Colab)."""
    env = os.environ.get("TPO_RESULTS_DIR")
    if env:
        return pathlib.Path(env) if pathlib.Path(env).is_dir() else None
    here = pathlib.Path(start) if start is not None else pathlib.Path.cwd()
    for base in (here, *here.parents):
        if (base / "results").is_dir():
            return base / "results"
    return None


def _read(path: pathlib.Path):
    with np.load(path, allow_pickle=False) as f:
        curves = {k[len("curve_") :]: np.asarray(f[k], float) for k in f.files if k.startswith("curve_")}
        seeds = tuple(int(s) for s in np.atleast_1d(f["seeds"])) if "seeds" in f.files else ()
        config = json.loads(str(f["config"])) if "config" in f.files else {}
        info = json.loads(str(f["info"])) if "info" in f.files else {}
    return curves, seeds, config, info


def _seed_number(path: pathlib.Path) -> int:
    m = re.fullmatch(r"seed_(\d+)\.npz", path.name)
    return int(m.group(1)) if m else -1


def load_runs(folder) -> dict:
    """{run name: :class:`CommittedRun`} of one preset folder (module docstring); a per-seed run holds the
    seed files present now, in seed order. Raises ValueError if ``folder`` is not a directory."""
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder {str(folder)!r} is not a directory")
    runs = {}
    for path in sorted(folder.glob("*.npz")):
        curves, seeds, config, info = _read(path)
        if curves:
            runs[path.stem] = CommittedRun(path.stem, curves, seeds, config, (info,))
    for sub in sorted(folder.glob("*.seeds")):
        files = sorted((p for p in sub.glob("seed_*.npz") if _seed_number(p) >= 0), key=_seed_number)
        parts = [_read(p) for p in files]
        parts = [p for p in parts if p[0]]
        if not parts:
            continue
        _check_one_configuration(sub, files, parts)
        keys = set.intersection(*(set(p[0]) for p in parts))
        curves = {k: np.concatenate([p[0][k] for p in parts]) for k in sorted(keys)}
        seeds = tuple(s for p in parts for s in p[1])
        name = sub.name[: -len(".seeds")]
        runs[name] = CommittedRun(name, curves, seeds, parts[0][2], tuple(p[3] for p in parts))
    return runs


def _check_one_configuration(sub: pathlib.Path, files, parts) -> None:
    """The seed files of one run must share its configuration and engine version: a stale seed of another
    configuration (say, an older engine's) must not slip into a chapter's seed mean."""
    first_config, first_engine = parts[0][2], parts[0][3].get("engine")
    for path, (_, _, config, info) in zip(files, parts):
        if config != first_config or info.get("engine") != first_engine:
            changed = sorted(k for k in set(config) | set(first_config) if config.get(k) != first_config.get(k))
            what = f"config keys {changed}" if changed else f"engine {info.get('engine')} vs {first_engine}"
            raise ValueError(
                f"{sub}: {path.name} was trained with another configuration than {files[0].name} "
                f"({what}); move it out of the folder or retrain it"
            )


def load_summary(folder) -> Optional[dict]:
    """The folder's ``summary.json`` (None if it has none yet)."""
    path = pathlib.Path(folder) / "summary.json"
    return json.loads(path.read_text()) if path.exists() else None
