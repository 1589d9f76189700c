"""Process resources of a JAX program: the persistent compile cache, the memory-map budget, devices.

Nothing here knows about training: modules that keep compiled programs (``tpo_core.train``) register a
function that forgets them with :func:`register_cache`, and :func:`release_compiled` calls it.
"""

from __future__ import annotations

import functools
import gc
import os
import pathlib
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np


def enable_compile_cache(path: str | None = None) -> str:
    """Turn on JAX's persistent compilation cache (default ``~/.cache/tpo_core/jax``, or ``$TPO_JAX_CACHE``)
    so a second process reuses compiled runs. Call it before the first compile (the CLI, the demo and the
    book's ``notebook.setup`` do)."""
    path = path or os.environ.get("TPO_JAX_CACHE") or str(pathlib.Path.home() / ".cache" / "tpo_core" / "jax")
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


# XLA's CPU backend maps every compiled kernel into its own memory regions: a compiled program holds memory maps
# in proportion to its fused kernels until it is freed. Linux allows vm.max_map_count per process; past it the
# next compile crashes the interpreter (SIGSEGV / SIGABRT inside XLA).
# A process that compiles many programs (a long preset, the demo server, a notebook) therefore frees its
# compiled programs once it holds half of the limit; they recompile on next use.
MAP_BUDGET_FRACTION = 0.5
_caches: list[Callable[[], None]] = []


def register_cache(clear: Callable[[], None]) -> None:
    """Register a function that forgets compiled programs; :func:`release_compiled` calls it."""
    _caches.append(clear)


def available_memory_bytes() -> int | None:
    """Memory a new program can use: the accelerator's limit (``memory_stats()['bytes_limit']``) when JAX's
    default device has one, else the host's ``MemAvailable`` (/proc/meminfo), else None (unknown)."""
    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # backends without memory statistics (CPU on some versions) raise instead of returning None
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def memory_map_count() -> int | None:
    """How many memory maps this process holds (Linux; None elsewhere)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def max_map_count() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 65530


def release_compiled(force: bool = False) -> bool:
    """Free every compiled program (the registered caches and JAX's jit caches) if this process holds more
    than ``MAP_BUDGET_FRACTION`` of the kernel's memory-map limit, or always with ``force``. Returns whether
    it freed them. Programs already handed out keep working; later calls recompile."""
    if not force:
        n = memory_map_count()
        if n is None or n < MAP_BUDGET_FRACTION * max_map_count():
            return False
    for clear in _caches:
        clear()
    jax.clear_caches()
    gc.collect()
    return True


# XLA's CPU backend has an optimisation preset for compile speed (``xla_cpu_opt_preset``). The training programs
# (``chunk``) compile with it: it spends less of XLA's compile on optimisation passes that these programs'
# episodes do not gain from (``python -m benchmarks.bench_train --compile`` compares the presets' compile and
# episode times); their numbers agree with the default preset's to float rounding, not bit for bit
# (tests/test_train.py checks both).
CHUNK_COMPILER_OPTIONS = {"xla_cpu_opt_preset": "CPU_OPT_PRESET_FAST_COMPILE"}
# The init program (parameters and optimizer state of every run) runs once per run, so how fast its code runs does
# not matter, only how fast it compiles: LLVM at level 1 as well. Its outputs are bit-identical to XLA's defaults
# (tests/test_train.py checks it); level 0's are not.
INIT_COMPILER_OPTIONS = {"xla_backend_optimization_level": 1, **CHUNK_COMPILER_OPTIONS}
_CHOSEN_BY_XLA_FLAGS = ("xla_backend_optimization_level", "xla_cpu_opt_preset")


# Which of these options the installed XLA knows depends on the jaxlib release: jaxlib 0.7.1 (the package's floor) to
# 0.9.2 (Colab's preinstalled release when this was written) know ``xla_backend_optimization_level`` but not
# ``xla_cpu_opt_preset``, and refuse the latter at compile time with ``INVALID_ARGUMENT: No such compile option``;
# jaxlib 0.10.2 (the pin) knows both. Rather than keep a version table, each option set is checked once per process by
# compiling a trivial program with it on the default backend: if the whole set compiles, it is used as is (the pinned
# jax: the same options as before); otherwise each option is tried alone and the ones XLA refuses are dropped, so that
# program compiles with XLA's default for it. Dropping an option changes compile time and at most float rounding, never
# what a program computes.
_supported: dict[tuple, dict] = {}


def _compiles_with(options: dict) -> bool:
    """Whether a trivial program compiles with ``options`` on the default backend."""
    try:
        jax.jit(lambda x: x + 1).lower(jax.ShapeDtypeStruct((), jnp.float32)).compile(dict(options))
    except Exception:  # XLA's runtime error; its class moved between jaxlib releases (XlaRuntimeError, JaxRuntimeError)
        return False
    return True


def supported_compiler_options(options: dict) -> dict:
    """``options`` less those the installed XLA refuses (unknown names or values), checked by compiling a trivial
    program once per process and option set; the kept options keep their order and values."""
    key = (jax.default_backend(), tuple((name, repr(value)) for name, value in options.items()))
    if key not in _supported:
        if not options or _compiles_with(options):
            _supported[key] = dict(options)
        else:
            _supported[key] = {name: value for name, value in options.items() if _compiles_with({name: value})}
    return dict(_supported[key])


def _cpu_options(options: dict) -> dict | None:
    flags = os.environ.get("XLA_FLAGS", "")
    if jax.default_backend() != "cpu" or any(name in flags for name in _CHOSEN_BY_XLA_FLAGS):
        return None
    return supported_compiler_options(options) or None


def init_compiler_options() -> dict | None:
    """XLA options for an init program: :data:`INIT_COMPILER_OPTIONS` on the CPU (those the installed XLA knows,
    :func:`supported_compiler_options`), unless ``XLA_FLAGS`` already chooses the LLVM level or the preset (the test
    suite's fast-compile flags); None (XLA's defaults) elsewhere."""
    return _cpu_options(INIT_COMPILER_OPTIONS)


def chunk_compiler_options() -> dict | None:
    """XLA options for a training program: :data:`CHUNK_COMPILER_OPTIONS` on the CPU (those the installed XLA knows,
    :func:`supported_compiler_options`), unless ``XLA_FLAGS`` already chooses the LLVM level or the preset; None
    (XLA's defaults, or none of the options known) elsewhere."""
    return _cpu_options(CHUNK_COMPILER_OPTIONS)


class TopLevelJit:
    """``jax.jit(fun)`` compiled with ``options`` when called at top level. JAX accepts compiler options on a top-level
    jit only; called inside another trace (``jax.jit``, ``jax.vmap``, ``jax.eval_shape`` of a caller), the same
    function is traced without them, as part of the caller's program. ``lower`` and ``trace`` are the top level's."""

    def __init__(self, fun: Callable, *, static_argnums=(), options: dict | None = None):
        self.nested = jax.jit(fun, static_argnums=static_argnums)
        self.top = jax.jit(fun, static_argnums=static_argnums, compiler_options=options) if options else self.nested
        functools.update_wrapper(self, fun)

    def __call__(self, *args):
        inside_a_trace = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(args))
        return (self.nested if inside_a_trace else self.top)(*args)

    def lower(self, *args, **kwargs):
        return self.top.lower(*args, **kwargs)

    def trace(self, *args, **kwargs):
        return self.top.trace(*args, **kwargs)

    def _cache_size(self) -> int:
        return self.top._cache_size()


def seed_keys(seeds: Sequence[int]):
    """One PRNG key per seed: seed s initialises from ``jax.random.key(s)`` (the paper's convention)."""
    return jnp.stack([jax.random.key(int(s)) for s in seeds])


def shard_leading(tree, n: int):
    """Place the leading (run) axis across all visible devices when it divides evenly; else leave it."""
    devices = jax.devices()
    if len(devices) < 2 or n % len(devices):
        return tree
    mesh = jax.sharding.Mesh(np.array(devices), ("runs",))
    spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("runs"))
    return jax.device_put(tree, spec)
