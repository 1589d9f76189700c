"""Whole-run jitted training loops, vmapped over seeds, streamable in chunks.

``make_token_program(cfg)`` / ``make_bandit_program(cfg)`` return a :class:`Program`:
``init(seeds) -> carry`` and ``chunk(carry, start, n) -> (carry, metrics)``, where ``chunk`` is one
``jax.jit`` of ``vmap`` (over seeds) of ``lax.scan`` (over ``n`` episodes). A whole run is one chunk;
a UI streams by calling chunks in a Python loop (each chunk size compiles once and is cached).

One token-task episode (PAPER.md §4):
    prompts ~ U{0..V-1}^[B, H] from fold_in(key_seed, e)
    rollout  answers [B, K, H] at temperature 1 (prompt encoded once, KV cache over answers)
    rewards, scores, error (measured before the update)
    epochs × { loss(batch) -> grads -> Muon/AdamW update }   # full batch, q/advantages frozen
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from . import losses as L
from . import methods, tasks
from .config import BanditConfig, TokenConfig
from .models import MLP, Transformer


# --------------------------------------------------------------------------------------------
# optimisers
# --------------------------------------------------------------------------------------------
def muon_adamw(lr: float):
    """Muon on 2-D parameters, AdamW (weight decay 0, Nesterov) on the rest, as the paper does."""
    def label(params):
        return jax.tree.map(lambda x: "muon" if x.ndim == 2 else "adamw", params)

    return optax.multi_transform(
        {"muon": optax.contrib.muon(lr), "adamw": optax.adamw(lr, weight_decay=0.0, nesterov=True)}, label)


def make_optimizer(name: str, lr: float):
    return muon_adamw(lr) if name == "muon" else optax.adam(lr)


# --------------------------------------------------------------------------------------------
# the program abstraction shared by both task families
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Program:
    """A compiled-once training program: ``init(seeds)`` and ``chunk(carry, start, n)``."""

    init: Callable
    chunk: Callable                 # (carry, start, n, *data) -> (carry, metrics with [S, n, ...])
    data: tuple = ()                # arrays passed to every chunk (bandit images)
    unit: str = "episodes"
    final_carry: object = None

    def run(self, seeds: Sequence[int], n: int, chunk_size: int | None = None) -> Iterator[tuple[int, dict]]:
        """Yield ``(done, metrics)`` after each chunk; metrics are numpy [S, chunk, ...]."""
        carry = self.init(seeds)
        size = chunk_plan(n, chunk_size)
        done = 0
        while done < n:
            step = min(size, n - done)
            carry, metrics = self.chunk(carry, done, step, *self.data)
            done += step
            yield done, jax.tree.map(np.asarray, metrics)
        self.final_carry = carry  # the last state (params, optimiser state), for inspection


def chunk_plan(n: int, requested: int | None) -> int:
    """Chunk length for streaming n episodes: a divisor of n near ``requested`` when one exists, so a
    run compiles a single chunk shape (a ragged last chunk would cost a second compile)."""
    if requested is None or requested >= n:
        return n
    requested = max(1, requested)
    best = max(d for d in range(1, requested + 1) if n % d == 0)
    return best if 2 * best >= requested else requested


def enable_compile_cache(path: str | None = None) -> str:
    """Turn on JAX's persistent compilation cache (default ``~/.cache/tpo_core/jax``) so a second
    process reuses compiled runs; the CLI, the demo and the book call this, before their first compile."""
    import os
    import pathlib

    path = path or os.environ.get("TPO_JAX_CACHE") or str(pathlib.Path.home() / ".cache" / "tpo_core" / "jax")
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


# XLA's CPU backend maps every compiled kernel into its own memory regions: one Transformer training program
# holds ~1,300 of the process's memory maps until it is freed. Linux allows vm.max_map_count (65,530 by
# default) per process; past it the next compile crashes the interpreter (SIGSEGV / SIGABRT inside XLA).
# A process that compiles many configurations (a long preset, the demo server, a notebook sweep) therefore
# frees its compiled programs when it has used half of the limit; they recompile on next use (seconds, or
# about one second from the persistent compile cache).
MAP_BUDGET_FRACTION = 0.5


def memory_map_count() -> int | None:
    """How many memory maps this process holds (Linux; None elsewhere)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def _max_map_count() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 65530


def release_compiled(force: bool = False) -> bool:
    """Free every compiled program (ours and JAX's jit caches) if this process holds more than
    ``MAP_BUDGET_FRACTION`` of the kernel's memory-map limit, or always with ``force``. Returns whether
    it freed them. Programs already handed out keep working; later calls recompile."""
    if not force:
        n = memory_map_count()
        if n is None or n < MAP_BUDGET_FRACTION * _max_map_count():
            return False
    import gc

    _token_program.cache_clear()
    _bandit_program.cache_clear()
    jax.clear_caches()
    gc.collect()
    return True


def seed_keys(seeds: Sequence[int]):
    return jnp.stack([jax.random.key(int(s)) for s in seeds])


def shard_seeds(tree, n_seeds: int):
    """Place the leading (seed) axis across all visible devices when it divides evenly."""
    devices = jax.devices()
    if len(devices) < 2 or n_seeds % len(devices):
        return tree
    mesh = jax.sharding.Mesh(np.array(devices), ("seeds",))
    spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("seeds"))
    return jax.device_put(tree, spec)


def _gather(logp_full, tokens):
    return jnp.take_along_axis(logp_full, tokens[..., None], -1)[..., 0]


# --------------------------------------------------------------------------------------------
# token tasks
# --------------------------------------------------------------------------------------------
def _transformer(cfg: TokenConfig, key):
    return Transformer(cfg.V, cfg.H, cfg.d_model, cfg.heads, cfg.layers, cfg.ffn, rngs=nnx.Rngs(key))


def make_token_program(cfg: TokenConfig) -> Program:
    """The compiled-once program of a token-task configuration (cached per configuration)."""
    release_compiled()
    return _token_program(cfg)


@functools.lru_cache(maxsize=64)
def _token_program(cfg: TokenConfig) -> Program:
    spec, hp = cfg.spec, cfg.hp
    B, H, V, K, E = cfg.B, cfg.H, cfg.V, cfg.K, cfg.n_epochs
    ks = cfg.samples_per_prompt
    n_track = min(cfg.track, B)
    tx = make_optimizer(cfg.optimizer, cfg.lr)
    graphdef = nnx.graphdef(nnx.eval_shape(lambda: _transformer(cfg, jax.random.key(0))))

    def model(params):
        return nnx.merge(graphdef, nnx.State(params["model"]))

    def init_one(key):
        params = {"model": nnx.to_pure_dict(nnx.split(_transformer(cfg, key), nnx.Param)[1])}
        if spec.learned:
            params["learned"] = {name: jnp.zeros(()) for name in spec.learned}
        return dict(params=params, opt=tx.init(params), key=key)

    def rollout(params, key, e):
        kp, ksmp, kc = jax.random.split(jax.random.fold_in(key, e), 3)
        prompts = jax.random.randint(kp, (B, H), 0, V)
        policy = model(params)
        answers, logp_full_old = policy.sample(prompts, ksmp, ks)             # [B, ks, H], [B, ks, H, V]
        if cfg.old_logp == "teacher_forced":  # recompute with the loss's own forward (+1 forward per episode)
            logp_full_old = policy.answer_logprobs(prompts, answers)
        target = tasks.target_tokens(prompts, cfg.target, V)                   # [B, H]
        correct = answers == target[:, None, :]
        rewards = tasks.token_rewards(correct, cfg.reward)                     # [B, ks, H]
        scores = tasks.sequence_scores(rewards)                                # [B, ks]
        token_logp_old = _gather(logp_full_old, answers)                       # [B, ks, H]
        batch = dict(prompts=prompts, answers=answers)
        if spec.sampling == "group":
            batch.update(logp_old=token_logp_old.sum(-1), scores=scores, token_logp_old=token_logp_old)
        elif spec.sampling == "single":
            batch.update(token_logp_old=token_logp_old[:, 0], rewards=rewards[:, 0])
        else:  # token: K i.i.d. candidates per state, candidate 0 = the behaviour token
            lp = logp_full_old[:, 0]                                           # [B, H, V]
            extra = jax.random.categorical(kc, lp[:, :, None, :], shape=(B, H, K - 1))
            cand = jnp.concatenate([answers[:, 0, :, None], extra], -1)        # [B, H, K]
            batch.update(cand=cand, logp_old=jnp.take_along_axis(lp, cand, -1),
                         scores=tasks.candidate_rewards(cand == target[:, :, None], correct[:, 0], cfg.reward))
        if cfg.reward_noise > 0 and "scores" in batch:  # optional score noise (own key); error stays noiseless
            noise_key = jax.random.fold_in(jax.random.fold_in(key, e), 7)
            batch["scores"] = batch["scores"] + cfg.reward_noise * jax.random.normal(noise_key, batch["scores"].shape)
        return batch, tasks.error_rate(scores)

    def loss_fn(params, batch):
        logp_full = model(params).answer_logprobs(batch["prompts"], batch["answers"])  # [B, ks, H, V]
        token_logp = _gather(logp_full, batch["answers"])
        b = dict(batch, learned=params.get("learned"))
        if spec.sampling == "group":
            b.update(logp=token_logp.sum(-1), token_logp=token_logp)
        elif spec.sampling == "single":
            b.update(token_logp=token_logp[:, 0])
        else:
            b.update(logp=jnp.take_along_axis(logp_full[:, 0], batch["cand"], -1))
        loss = spec.loss(b, hp)
        if spec.sampling == "group":  # p of the tracked groups (informative groups first)
            tracked = jax.nn.softmax(b["logp"][_tracked(batch["scores"])], -1)
        else:
            tracked = jnp.zeros((n_track, 1))
        return loss, tracked

    def _tracked(scores):
        return jnp.argsort(L.zero_variance(scores))[:n_track]

    def episode(state, e):
        batch, error = rollout(state["params"], state["key"], e)

        def epoch(carry, _):
            params, opt = carry
            (loss, p_track), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch)
            updates, opt = tx.update(grads, opt, params)
            return (optax.apply_updates(params, updates), opt), (loss, optax.global_norm(grads["model"]), p_track)

        (params, opt), (loss, gnorm, p_track) = jax.lax.scan(epoch, (state["params"], state["opt"]), None, length=E)
        metrics = dict(error=error, loss=loss[0], grad_norm=gnorm[0], grad_norm_last=gnorm[-1])
        if "scores" in batch:  # group and token methods: group statistics and TPO's target
            s = batch["scores"].reshape(-1, batch["scores"].shape[-1])
            lo = batch["logp_old"].reshape(s.shape)
            zero = L.zero_variance(s)
            q = L.tpo_target(lo, s, cfg.eta, std_floor=cfg.std_floor)
            good = (s > s.mean(-1, keepdims=True)).astype(jnp.float32)
            informative = (~zero).astype(jnp.float32)
            metrics.update(
                zero_var_frac=zero.mean(),
                success_mass=((q * good).sum(-1) * informative).sum() / jnp.maximum(informative.sum(), 1.0),
                success_mass_old=((jax.nn.softmax(lo, -1) * good).sum(-1) * informative).sum()
                / jnp.maximum(informative.sum(), 1.0))
            if spec.sampling == "group" and n_track:
                idx = _tracked(s)
                metrics.update(track_q=q[idx], track_p=jnp.moveaxis(p_track, 0, 1),  # p: [n_track, epochs, K]
                               track_scores=s[idx], track_informative=~zero[idx])
        else:
            metrics.update(zero_var_frac=jnp.zeros(()), success_mass=jnp.zeros(()), success_mass_old=jnp.zeros(()))
        return dict(state, params=params, opt=opt), metrics

    @functools.partial(jax.jit, static_argnums=2)
    def chunk(carry, start, n):
        def one_seed(state):
            return jax.lax.scan(episode, state, start + jnp.arange(n))
        return jax.vmap(one_seed)(carry)

    def init(seeds):
        keys = seed_keys(seeds)
        return shard_seeds(jax.jit(jax.vmap(init_one))(keys), len(seeds))

    return Program(init=init, chunk=chunk)


# --------------------------------------------------------------------------------------------
# MNIST contextual bandit
# --------------------------------------------------------------------------------------------
def make_bandit_program(cfg: BanditConfig, dataset) -> Program:
    """The compiled-once program of a bandit configuration on ``dataset`` (cached per pair)."""
    release_compiled()
    return _bandit_program(cfg, dataset)


@functools.lru_cache(maxsize=32)
def _bandit_program(cfg: BanditConfig, dataset) -> Program:
    spec, hp = methods.get(cfg.method), cfg.hp
    in_dim = dataset.x_train.shape[1]
    tx = optax.adam(cfg.lr)
    graphdef = nnx.graphdef(nnx.eval_shape(lambda: MLP(in_dim, cfg.hidden, 10, rngs=nnx.Rngs(0))))

    def model(params):
        return nnx.merge(graphdef, nnx.State(params))

    def init_one(key):
        params = nnx.to_pure_dict(nnx.split(MLP(in_dim, cfg.hidden, 10, rngs=nnx.Rngs(key)), nnx.Param)[1])
        return dict(params=params, opt=tx.init(params), key=key)

    def step(state, s, x_train, y_train):
        k_idx, k_act = jax.random.split(jax.random.fold_in(state["key"], s))
        idx = jax.random.randint(k_idx, (cfg.batch,), 0, x_train.shape[0])
        x, y = x_train[idx], y_train[idx]
        logits = model(state["params"])(x)
        pi = jax.nn.softmax(logits)
        actions = jax.random.categorical(k_act, logits)
        reward = (actions == y).astype(jnp.float32)
        adv = reward - (pi**2).sum(-1)  # expected-reward baseline

        def loss_fn(params):
            return spec.bandit(model(params)(x), actions, y, adv, hp)

        loss, grads = jax.value_and_grad(loss_fn)(state["params"])
        updates, opt = tx.update(grads, state["opt"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        metrics = dict(train_error=1.0 - reward.mean(), loss=loss, grad_norm=optax.global_norm(grads))
        return dict(state, params=params, opt=opt), metrics

    def block(state, b, x_train, y_train, x_test, y_test):
        steps = b * cfg.eval_every + jnp.arange(cfg.eval_every)
        state, m = jax.lax.scan(lambda st, s: step(st, s, x_train, y_train), state, steps)
        greedy = model(state["params"])(x_test).argmax(-1)
        out = {k: v.mean() for k, v in m.items()}
        out["test_error"] = (greedy != y_test).mean()
        return state, out

    @functools.partial(jax.jit, static_argnums=2)
    def chunk(carry, start, n, x_train, y_train, x_test, y_test):
        def one_seed(state):
            return jax.lax.scan(lambda st, b: block(st, b, x_train, y_train, x_test, y_test),
                                state, start + jnp.arange(n))
        return jax.vmap(one_seed)(carry)

    def init(seeds):
        return shard_seeds(jax.jit(jax.vmap(init_one))(seed_keys(seeds)), len(seeds))

    data = tuple(jnp.asarray(a) for a in (dataset.x_train, dataset.y_train, dataset.x_test, dataset.y_test))
    return Program(init=init, chunk=chunk, data=data, unit=f"blocks of {cfg.eval_every} steps")


# --------------------------------------------------------------------------------------------
# convenience: whole runs
# --------------------------------------------------------------------------------------------
def _collect(stream) -> dict:
    parts = [m for _, m in stream]
    return {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}


def train_tokens(cfg: TokenConfig, seeds: Sequence[int] = (0,), chunk_size: int | None = None,
                 callback: Callable | None = None) -> dict:
    """Run ``cfg`` for every seed; returns metrics as numpy arrays [S, episodes, ...]."""
    program = make_token_program(cfg)

    def stream():
        for done, m in program.run(seeds, cfg.episodes, chunk_size):
            if callback:
                callback(done, m)
            yield done, m

    return _collect(stream())


def train_bandit(cfg: BanditConfig, dataset, seeds: Sequence[int] = (0,), chunk_size: int | None = None,
                 callback: Callable | None = None) -> dict:
    """Run the bandit for every seed; metrics [S, steps // eval_every] (test error after each block)."""
    program = make_bandit_program(cfg, dataset)
    n_blocks = cfg.steps // cfg.eval_every

    def stream():
        for done, m in program.run(seeds, n_blocks, chunk_size):
            if callback:
                callback(done, m)
            yield done, m

    return _collect(stream())
