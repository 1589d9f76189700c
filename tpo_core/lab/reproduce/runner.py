"""Run a preset: train every run (resuming what is already on disk), write per-run curves, a summary and a
figure. Nothing is half-written: every file is replaced atomically.

Storage under the output folder ``DIR``:

* ``DIR/<run>.npz`` — a whole run (all its seeds) with the hash of its configuration and seeds;
* ``DIR/<run>.seeds/seed_<s>.npz`` — runs with ``seed_batch`` (the paper budgets on a CPU) store one file per
  seed, keyed by the hash of the configuration, the seed and the engine version, so adding seeds later
  reuses every finished one;
* ``DIR/.checkpoints/<hash>.npz`` — the carry (parameters, optimizer state, keys) and the curves so far of
  the batch in progress, written after every chunk and deleted when it finishes: a killed run resumes at
  its next unfinished chunk (not committed; across sessions a run resumes at its next unfinished seed).

Runs that differ only in traced knobs (η, lr, ...) and share their seeds and length train as one program
(a sweep): the η-sweep preset compiles once.

Scale-out: each batch is one program (``jit`` of ``vmap`` over runs of ``scan`` over episodes); the seed axis
is padded to a multiple of ``jax.device_count()`` and sharded over all devices. With ``--distributed``,
``jax.distributed.initialize()`` runs first, so on several hosts the same command sees every host's devices;
metrics are gathered with ``multihost_utils.process_allgather`` and only process 0 writes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import sys
import time
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from tpo_core import runtime, train

from .. import atomic_io
from . import experiments, stats
from .presets import PRESETS, RESULTS_VERSION, Preset, Run, get


def is_main_process() -> bool:
    return jax.process_index() == 0


def _to_numpy(x):
    if isinstance(x, jax.Array) and not x.is_fully_addressable:  # several hosts: gather the run axis
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def padded_seeds(seeds: Sequence[int], n_devices: int) -> list:
    """Seeds padded with extra ones to a multiple of the device count, so the run axis shards evenly
    (the extra seeds' results are dropped)."""
    seeds = list(seeds)
    pad = (-len(seeds)) % n_devices if n_devices > 1 else 0
    return seeds + [max(seeds) + 1 + i for i in range(pad)]


# --------------------------------------------------------------------------------------------
# checkpoints of the carry
# --------------------------------------------------------------------------------------------
def _is_key(x) -> bool:
    return jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def save_checkpoint(path, tag: str, carry, done: int, parts: list) -> None:
    leaves = jax.tree.leaves(carry)
    arrays = {f"leaf_{i}": _to_numpy(jax.random.key_data(x) if _is_key(x) else x) for i, x in enumerate(leaves)}
    curves = {f"m_{k}": np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]} if parts else {}
    atomic_io.write_npz(path, tag=np.array(tag), done=np.array(done), **arrays, **curves)


def load_checkpoint(path, tag: str, template):
    """(carry, done, parts) from ``path`` if it belongs to ``tag``, else None. ``template`` is a fresh carry
    of the same program (its structure, dtypes and sharding)."""
    try:
        with np.load(path) as f:
            if str(f["tag"]) != tag:
                return None
            leaves, treedef = jax.tree.flatten(template)
            restored = []
            for i, x in enumerate(leaves):
                saved = f[f"leaf_{i}"]
                restored.append(jax.random.wrap_key_data(saved) if _is_key(x) else jnp.asarray(saved, x.dtype))
            parts = [{k[2:]: f[k] for k in f.files if k.startswith("m_")}]
            return jax.tree.unflatten(treedef, restored), int(f["done"]), [p for p in parts if p]
    except Exception:  # missing, truncated or foreign file: start the batch again
        return None


# --------------------------------------------------------------------------------------------
# training one batch: runs sharing a program, for some seeds
# --------------------------------------------------------------------------------------------
def execute(
    runs: Sequence[Run],
    seeds: Sequence[int],
    dataset=None,
    chunk: Optional[int] = None,
    bar=None,
    checkpoint: Optional[pathlib.Path] = None,
    log=None,
) -> tuple[list[dict], dict]:
    """Train ``runs`` (same ``cfg.static`` and length; their knobs may differ) for ``seeds`` as one program.
    Returns (curves [S, T] per metric for each run, info)."""
    cfg = runs[0].cfg
    program = train.make_bandit_program(cfg, dataset) if not runs[0].family.is_token else train.make_token_program(cfg)
    n = runs[0].length
    size = train.chunk_plan(n, chunk if chunk else max(1, n // 20))
    padded = padded_seeds(seeds, jax.device_count())
    points = [r.cfg.knobs for r in runs]
    tag = hashlib.sha256(json.dumps([[r.seed_hash(s) for s in padded] for r in runs]).encode()).hexdigest()[:16]
    t0 = time.perf_counter()
    carry = program.init(padded, points)
    done, parts, devices = 0, [], 1
    if checkpoint is not None and is_main_process():
        atomic_io.remove_stale_temps(checkpoint)  # a run killed while it wrote its checkpoint
    if checkpoint is not None and checkpoint.exists():
        restored = load_checkpoint(checkpoint, tag, carry)
        if restored is not None:
            carry, done, parts = restored
            carry = jax.tree.map(
                lambda new, old: jax.device_put(new, old.sharding), carry, program.init(padded, points)
            )
            if log:
                log(f"resumed from {checkpoint.name} at {done}/{n}")
            if bar is not None:
                bar.update(done)

    def device_chunk(c, start, k):  # the metrics stay on the devices: _to_numpy gathers them across processes
        return program.chunk(c, start, k, *program.data)

    sizes = [min(size, n - d) for d in range(done, n, size)]
    chunks = train.run_chunks(program, carry, sizes, start=done, call=device_chunk)
    for carry, done, metrics in chunks:
        devices = len(next(iter(metrics.values())).sharding.device_set)
        parts.append({k: _to_numpy(v) for k, v in metrics.items() if v.ndim == 2})
        if checkpoint is not None and done < n and is_main_process():
            save_checkpoint(checkpoint, tag, carry, done, parts)
        if bar is not None:
            bar.update(next(iter(parts[-1].values())).shape[1])
    if checkpoint is not None and checkpoint.exists() and is_main_process():
        checkpoint.unlink()
    full = {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}
    S = len(padded)
    out = [{k: v[i * S : i * S + len(seeds)] for k, v in full.items()} for i in range(len(runs))]
    info = dict(
        seconds=time.perf_counter() - t0, devices=devices, padded_seeds=S, sweep=len(runs), engine=RESULTS_VERSION
    )
    return out, info


# --------------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------------
def load_run_file(path: pathlib.Path, config_hash: str):
    try:
        with np.load(path) as f:
            if str(f["config_hash"]) != config_hash:
                return None
            return {k[len("curve_") :]: f[k] for k in f.files if k.startswith("curve_")}, json.loads(str(f["info"]))
    except Exception:  # missing, truncated or foreign file: train again
        return None


def write_run_file(path, run: Run, curves: dict, info: dict, seeds=None) -> None:
    seeds = run.seeds if seeds is None else seeds
    h = run.config_hash() if len(seeds) != 1 or run.seed_batch is None else run.seed_hash(seeds[0])
    atomic_io.remove_stale_temps(path)  # left by a process killed while it wrote this file
    atomic_io.write_npz(
        path,
        config_hash=np.array(h),
        info=np.array(json.dumps(info)),
        config=np.array(json.dumps(dataclasses.asdict(run.cfg), default=str)),
        seeds=np.array(seeds),
        **{f"curve_{k}": v for k, v in curves.items()},
    )


def seed_file(out: pathlib.Path, run: Run, seed: int) -> pathlib.Path:
    return out / f"{run.stem}.seeds" / f"seed_{seed}.npz"


def finished_seeds(name: str, budget: str, out) -> dict:
    """{run key: (seeds, curves {metric: [S, T]})} of the per-seed runs of a preset, with the seeds whose files
    in ``out`` are finished and belong to this configuration (a reproduction in progress; nothing trained)."""
    out = pathlib.Path(out)
    found = {}
    for r in get(name).runs(budget)[0]:
        if not r.seed_batch:
            continue
        got = [(s, load_run_file(seed_file(out, r, s), r.seed_hash(s))) for s in r.seeds]
        got = [(s, g[0]) for s, g in got if g is not None]
        if got:
            keys = set.intersection(*(set(c) for _, c in got))  # seeds from before a metric was added lack it
            found[r.key] = ([s for s, _ in got], {k: np.concatenate([c[k] for _, c in got]) for k in sorted(keys)})
    return found


# --------------------------------------------------------------------------------------------
# a whole preset
# --------------------------------------------------------------------------------------------
def _jobs(runs: list[Run], have: dict) -> list[tuple[list[Run], tuple]]:
    """What is left to train, as (runs sharing one program, seeds) batches: per-seed runs seed-major (every
    run's seed 0, then every run's seed 1, ...), so a partial reproduction has all methods at equal seeds;
    whole runs grouped into sweeps where only knobs differ."""
    jobs = []
    seeded = [r for r in runs if r.seed_batch]
    width = max((len(r.seeds) for r in seeded), default=0)
    for start in range(0, width, max((r.seed_batch for r in seeded), default=1)):
        for r in seeded:
            batch = tuple(s for s in r.seeds[start : start + r.seed_batch] if (r.key, s) not in have)
            if batch:
                jobs.append(([r], batch))
    groups: dict = {}
    for r in runs:
        if not r.seed_batch and r.key not in have:
            groups.setdefault((r.cfg.static, r.length, r.seeds, r.family.kind), []).append(r)
    jobs += [(g, g[0].seeds) for g in groups.values()]
    return jobs


def run_preset(
    name: str,
    budget: str = "smoke",
    out=None,
    *,
    chunk: Optional[int] = None,
    progress: bool = True,
    dataset=None,
    command: Optional[str] = None,
    log=None,
    seeds: Optional[int] = None,
    only: Optional[Sequence[str]] = None,
    partial: bool = False,
) -> Optional[dict]:
    """Train (or resume) every run of a preset and return its summary; with ``out``, write the per-run
    files, ``summary.json`` and ``figure.html`` there (atomically). ``seeds`` overrides the number of seeds.

    ``only`` (run keys, e.g. ``["tpo_H_10_P"]``) trains those runs alone, so that several processes can share
    one reproduction (one per core, each with its own runs, all writing into ``out``). The summary needs every
    run: it is written (and returned) only once the other runs' files are there too, else None.

    ``partial`` trains nothing: it summarises the per-seed runs with the seeds finished so far (a long
    reproduction in progress); the summary says ``partial: true`` and each row lists its seeds."""
    preset = get(name)
    runs, note = preset.runs(budget)
    if only is not None:  # run keys ("tpo H=10 P") or their file stems ("tpo_H_10_P")
        names = {n: r.key for r in runs for n in (r.key, r.stem)}
        unknown = [k for k in only if k not in names]
        if unknown or not only:
            raise ValueError(
                f"only must name runs of {name} at budget {budget} "
                f"({', '.join(r.stem for r in runs)}), got {', '.join(unknown) or 'nothing'}"
            )
        only = {names[k] for k in only}
    if seeds is not None:
        if not (isinstance(seeds, int) and seeds >= 1):
            raise ValueError(f"seeds must be an integer >= 1, got {seeds!r}")
        runs = [dataclasses.replace(r, seeds=tuple(range(seeds))) for r in runs]
        note += f"; {seeds} seeds (set on the command line)"
    log = log or (lambda msg: print(msg, file=sys.stderr))
    main = is_main_process()
    out = pathlib.Path(out) if out is not None else None
    if dataset is None and any(not r.family.is_token for r in runs):
        from .. import mnist

        dataset = mnist.load()
    t_start = time.perf_counter()

    # what is on disk: whole-run files, and single seeds of per-seed runs
    whole, per_seed, infos = {}, {}, {}
    for r in runs:
        if out is None:
            continue
        if r.seed_batch:
            for s in r.seeds:
                got = load_run_file(seed_file(out, r, s), r.seed_hash(s))
                if got is not None:
                    per_seed[(r.key, s)] = got
        else:
            got = load_run_file(out / r.filename, r.config_hash())
            if (
                got is not None
                and not r.family.is_token
                and got[1].get("data_source", dataset.source) != dataset.source
            ):
                log(f"[{name}] {r.key}: {r.filename} was trained on other data ({got[1]['data_source']}), retraining")
                got = None
            if got is not None:
                whole[r.key] = got
                log(f"[{name}] {r.key}: found {r.filename}, skipped")
    have = {**{k: True for k in whole}, **{k: True for k in per_seed}}
    if partial:
        if out is None:
            raise ValueError("partial needs out, the folder of the finished seeds")
        runs = [
            dataclasses.replace(r, seeds=tuple(s for s in r.seeds if (r.key, s) in per_seed)) if r.seed_batch else r
            for r in runs
            if (r.key in whole) or r.seed_batch
        ]
        runs = [r for r in runs if r.seeds]
        if not runs:
            raise ValueError(f"partial: {out} holds no finished seed of {name} at budget {budget}")
        note += "; in progress: " + ", ".join(f"{r.key} {len(r.seeds)} seeds" for r in runs if r.seed_batch)
    jobs = [] if partial else _jobs([r for r in runs if only is None or r.key in only], have)
    for i, (group, batch) in enumerate(jobs):
        label = group[0].key if len(group) == 1 else f"{len(group)} runs ({group[0].key} ...)"
        bar = None
        if progress and main:
            from tqdm.auto import tqdm

            bar = tqdm(
                total=group[0].length,
                desc=f"{name} {i + 1}/{len(jobs)} {label} seeds {list(batch)}",
                unit="ep" if group[0].family.is_token else "eval",
                dynamic_ncols=True,
                file=sys.stderr,
            )
        ckpt = None
        if out is not None:
            tag = hashlib.sha256(json.dumps([[r.seed_hash(s) for s in batch] for r in group]).encode()).hexdigest()[:16]
            ckpt = out / ".checkpoints" / f"{tag}.npz"
        curves, info = execute(group, batch, dataset, chunk, bar, ckpt, log)
        if not group[0].family.is_token:
            info["data_source"] = dataset.source
        if bar is not None:
            bar.close()
        for r, c in zip(group, curves):
            if r.seed_batch:
                for j, s in enumerate(batch):
                    one = {k: v[j : j + 1] for k, v in c.items()}
                    per_seed[(r.key, s)] = (one, dict(info, seconds=info["seconds"] / len(batch)))
                    if out is not None and main:
                        write_run_file(seed_file(out, r, s), r, one, per_seed[(r.key, s)][1], seeds=(s,))
            else:
                whole[r.key] = (c, info)
                if out is not None and main:
                    write_run_file(out / r.filename, r, c, info)
    missing = [r.key for r in runs if (r.key not in whole) if not r.seed_batch] + [
        f"{r.key} seed {s}" for r in runs if r.seed_batch for s in r.seeds if (r.key, s) not in per_seed
    ]
    if missing:
        log(
            f"[{name}] {len(missing)} runs or seeds are not done yet ({', '.join(missing[:4])}"
            f"{', ...' if len(missing) > 4 else ''}): no summary written"
        )
        return None
    all_curves = {}
    for r in runs:
        if r.seed_batch:
            parts = [per_seed[(r.key, s)] for s in r.seeds]
            all_curves[r.key] = {k: np.concatenate([p[0][k] for p in parts]) for k in parts[0][0]}
            infos[r.key] = dict(
                seconds=sum(p[1].get("seconds", 0.0) for p in parts),
                devices=max(p[1].get("devices", 1) for p in parts),
                engine=min(p[1].get("engine", 1) for p in parts),
            )
        else:
            all_curves[r.key], infos[r.key] = whole[r.key]
    summary = summarize(
        preset, budget, note, runs, all_curves, infos, command=command, data_source=getattr(dataset, "source", None)
    )
    summary["wall_seconds"] = time.perf_counter() - t_start
    summary["partial"] = bool(partial)
    if out is not None and main:
        from .figure import preset_figure_html

        atomic_io.write_json(out / "summary.json", summary)
        atomic_io.write_text(out / "figure.html", preset_figure_html(summary, runs, all_curves))
    return summary


def summarize(preset, budget: str, note: str, runs, curves: dict, infos: dict, command=None, data_source=None) -> dict:
    rows = []
    for run in runs:
        c = curves[run.key][run.primary]
        comparable = preset.comparable(run, data_source)
        for metric in preset.metrics:
            m = measure = stats.measure(c, metric)
            paper = preset.paper(run.label, metric) if comparable else None
            paper_se = preset.paper_se(run.label, metric) if comparable else None
            delta = preset.resolution(run.label, metric)
            v = None
            if paper is not None:
                v = stats.steps_verdict(m["value"], paper, run.length) if metric == "steps_to_1pct" else None
                if v is None:
                    v = stats.verdict(m["value"], m["se"], paper, delta, paper_se or 0.0)
            rows.append(
                dict(
                    key=run.key,
                    method=run.method,
                    labels=run.label,
                    metric=metric,
                    ours=measure["value"],
                    se=measure["se"],
                    per_seed=measure["per_seed"],
                    comparable=comparable,
                    paper=list(paper) if isinstance(paper, tuple) else paper,
                    paper_text=stats.paper_text(paper) if comparable else "no paper number at this setting",
                    paper_se=paper_se,
                    resolution=delta,
                    verdict=v,
                    seeds=list(run.seeds),
                    length=run.length,
                    config_hash=run.config_hash(),
                    seconds=infos[run.key].get("seconds"),
                    devices=infos[run.key].get("devices"),
                    engine=infos[run.key].get("engine", 1),
                    config=dataclasses.asdict(run.cfg),
                )
            )
    engines = sorted({i.get("engine", 1) for i in infos.values()})
    summary = dict(
        preset=preset.name,
        title=preset.title,
        claim=preset.claim,
        budget=budget,
        budget_note=note,
        engine=engines,
        paper_setting=preset.paper_setting,
        metrics=list(preset.metrics),
        command=command or f"python -m tpo_core reproduce {preset.name} --budget {budget}",
        rows=rows,
        devices=max((i.get("devices") or 1) for i in infos.values()),
        train_seconds=sum(i.get("seconds") or 0.0 for i in infos.values()),
    )
    if data_source:
        summary["data_source"] = data_source
    if preset.extras is not None:
        summary.update(preset.extras(preset, runs, curves, rows))
    return summary


# --------------------------------------------------------------------------------------------
# the JAX family of the registry
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class JaxExperiment:
    """A preset as an experiment of the registry (:class:`tpo_core.lab.reproduce.experiments.Experiment`): the
    :class:`~tpo_core.lab.reproduce.presets.Preset` says what it is, what each budget trains and how its summary
    reads (every attribute but ``train`` is the preset's); this adds how it trains, :func:`run_preset`, which
    the presets module cannot import (this module imports it)."""

    preset: Preset

    def __getattr__(self, name):
        if name == "preset":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.preset, name)

    def train(
        self,
        budget: str,
        out=None,
        *,
        seeds: Optional[int] = None,
        only=None,
        partial: bool = False,
        progress: bool = True,
        command: Optional[str] = None,
        chunk: Optional[int] = None,
        distributed: bool = False,
        **options,
    ) -> Optional[dict]:
        """:func:`run_preset` into ``out`` (default ``results/<name>``); ``only`` names run keys or their file
        stems. ``chunk``: episodes per streamed chunk; ``distributed``: ``jax.distributed.initialize()`` first
        (several hosts, one process each). None on a process other than the first (only the first writes)."""
        experiments.refuse_options(self, options, "a JAX preset")
        experiments.check_budget(self, budget)
        if distributed:  # before any JAX computation
            jax.distributed.initialize()
        runtime.enable_compile_cache()
        summary = run_preset(
            self.name,
            budget,
            self.default_out(budget) if out is None else out,
            chunk=chunk,
            progress=progress,
            command=command,
            seeds=seeds,
            only=only,
            partial=partial,
        )
        return summary if is_main_process() else None


EXPERIMENTS = {name: JaxExperiment(p) for name, p in PRESETS.items()}  # this family's part of the registry
