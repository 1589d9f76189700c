"""Whole-run jitted training loops, vmapped over seeds, streamable in chunks.

``make_token_program(cfg)`` / ``make_bandit_program(cfg)`` return a :class:`Program`:
``init(seeds, points) -> carry`` and ``chunk(carry, start, n) -> (carry, metrics)``, where ``chunk`` is one
``jax.jit`` of ``vmap`` (over runs) of ``lax.scan`` (over ``n`` episodes). A whole run is one chunk;
a UI streams through the library's one chunk loop, :func:`run_chunks` (each chunk size compiles
once and is cached). Each method's sampling kind is a ``Sampling`` (``SAMPLINGS``), chosen once per program.

The compiled program is keyed on the configuration's *static* part only (``cfg.static``: method, task,
shapes, epochs, model, optimizer kind). The scalar hyperparameters (``cfg.knobs``: η, lr, β, clip ε, σ floor,
reward noise) live in the carry as traced values, one per run, so a new η reuses the compiled program and a
sweep ``{"eta": [...]}`` × seeds is one vmapped program (runs = sweep points × seeds, flattened).

One token-task episode (arXiv 2604.06159 §3.4–3.6; the reference repository's token-reversal trial):
    prompts ~ U{0..V-1}^[B, H] from fold_in(key_seed, e)
    rollout  answers [B, K, H] at temperature 1 (prompt encoded once, KV cache over answers)
    rewards, scores, error (measured before the update)
    refill variants (``tpo_refill``): round(B·r) prompts drawn, the first B informative groups kept
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
from . import methods, runtime, tasks
from .config import BanditConfig, TokenConfig, check_sweep
from .models import MLP, Transformer


# --------------------------------------------------------------------------------------------
# optimisers
# --------------------------------------------------------------------------------------------
def optimizer_route(params):
    """Which optimizer :func:`muon_adamw` gives each array: ``"muon"`` for 2-D matrices, ``"adamw"`` for the rest."""
    return jax.tree.map(lambda x: "muon" if x.ndim == 2 else "adamw", params)


def muon_adamw(learning_rate: float):
    """Muon on 2-D parameters, AdamW (weight decay 0, Nesterov) on the rest, as the paper does."""
    return optax.multi_transform(
        {
            "muon": optax.contrib.muon(learning_rate),
            "adamw": optax.adamw(learning_rate, weight_decay=0.0, nesterov=True),
        },
        optimizer_route,
    )


def make_optimizer(name: str):
    """The optimizer with a traced learning rate: ``opt_state.hyperparams["learning_rate"]`` (set by
    :func:`with_lr` at init) scales every step, so the lr is a knob, not a compile key."""
    return optax.inject_hyperparams(muon_adamw if name == "muon" else optax.adam)(learning_rate=1e-3)


def with_lr(opt_state, lr):
    """``opt_state`` of a :func:`make_optimizer` optimizer with its traced learning rate set to ``lr``."""
    return opt_state._replace(hyperparams={**opt_state.hyperparams, "learning_rate": jnp.asarray(lr, jnp.float32)})


# --------------------------------------------------------------------------------------------
# the program abstraction shared by both task families
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Program:
    """A compiled-once training program bound to one configuration's knobs.

    ``init(seeds, points)`` builds the carry of ``len(points) × len(seeds)`` runs (point-major: every seed
    of the first sweep point, then the next); each point overrides some of ``knobs``. ``chunk(carry, start,
    n, *data)`` advances every run by ``n`` episodes and returns metrics [runs, n, ...].
    """

    init_runs: Callable  # (keys [N], knobs {name: [N]}) -> carry
    chunk: Callable  # (carry, start, n, *data) -> (carry, metrics with [N, n, ...])
    knobs: dict  # this configuration's traced scalars
    data: tuple = ()  # arrays passed to every chunk (bandit images)
    unit: str = "episodes"

    def init(self, seeds: Sequence[int], points: Sequence[dict] | None = None):
        """The carry of ``len(points) × len(seeds)`` fresh runs, point-major (every seed of the first point,
        then the next), each point's knobs overriding this program's; sharded over devices on the run axis."""
        points = list(points) if points else [{}]
        rows = [{**self.knobs, **p} for p in points for _ in seeds]
        knobs = {k: jnp.asarray([r[k] for r in rows], jnp.float32) for k in self.knobs}
        keys = runtime.seed_keys([s for _ in points for s in seeds])
        return runtime.shard_leading(self.init_runs(keys, knobs), len(rows))

    def run(
        self, seeds: Sequence[int], n: int, chunk_size: int | None = None, points: Sequence[dict] | None = None
    ) -> Iterator[tuple[int, dict]]:
        """Yield ``(done, metrics)`` after each chunk (the library's one chunk loop,
        :func:`run_chunks`, in chunks of :func:`chunk_plan`); metrics are numpy [runs, chunk, ...]."""
        for _, done, metrics in run_chunks(self, self.init(seeds, points), chunk_sizes(n, chunk_size)):
            yield done, metrics


def chunk_plan(n: int, requested: int | None) -> int:
    """Chunk length for streaming n episodes: a divisor of n near ``requested`` when one exists, so a
    run compiles a single chunk shape (a ragged last chunk would cost a second compile); the first of
    :func:`chunk_sizes`."""
    sizes = chunk_sizes(n, requested)
    return sizes[0] if sizes else n


# --------------------------------------------------------------------------------------------
# the one chunk loop, its chunk sizes, and a sweep's metrics by point
# --------------------------------------------------------------------------------------------
def chunk_sizes(total: int, size: int | None = None, *, first: int | None = None) -> list:
    """The chunk lengths that stream ``total`` steps.

    Without ``first`` (whole runs): chunks of a divisor of ``total`` near ``size`` when one exists (one compiled
    shape), else of ``size`` with a ragged last chunk; ``size`` None or >= total: one chunk. With ``first``
    (a UI that wants its first points at once): ``first``, then ``size`` repeatedly, then 1s for the remainder
    (two compiled shapes)."""
    if total <= 0:
        return []
    if first is not None:
        rest = total - first
        return [first] + [size] * (rest // size) + [1] * (rest % size)
    if size is None or size >= total:
        return [total]
    size = max(1, size)
    best = max(d for d in range(1, size + 1) if total % d == 0)
    size = best if 2 * best >= size else size
    return [size] * (total // size) + ([total % size] if total % size else [])


def run_chunks(program, carry, sizes, start: int = 0, call=None) -> Iterator[tuple]:
    """The chunk loop (of :meth:`Program.run`, the UI streams of :mod:`tpo_core.stream`, the book's timed runs):
    advance ``carry`` by each of ``sizes`` in turn; yield ``(carry, done, metrics)`` after
    each chunk, metrics numpy [runs, n, ...]. ``call(carry, start, n)`` runs one chunk (default: the
    program's chunk, blocking until its metrics are on the host)."""
    call = call or (lambda c, s, n: chunk_to_host(program, c, s, n))
    done = start
    for n in sizes:
        carry, metrics = call(carry, done, n)
        done += n
        yield carry, done, metrics


def chunk_to_host(program, carry, start: int, n: int):
    """One chunk of ``program`` from episode ``start``, blocking until its metrics are on the host (numpy)."""
    carry, metrics = program.chunk(carry, start, n, *program.data)
    return carry, jax.tree.map(np.asarray, metrics)


def by_point(metrics: dict, n_points: int, n_seeds: int) -> dict:
    """Metrics of a sweep's runs [P·S, ...] (point-major, as :meth:`tpo_core.train.Program.init` lays them
    out) as [P, S, ...]."""
    return {k: v.reshape((n_points, n_seeds) + v.shape[1:]) for k, v in metrics.items()}


def _clear_programs():
    _token_program.cache_clear()
    _token_parts.cache_clear()
    _bandit_program.cache_clear()


def _init_runs(init_one):
    """The init program of every run; compiled for compile speed (it runs once), see ``runtime.INIT_COMPILER_OPTIONS``."""
    return runtime.TopLevelJit(jax.vmap(init_one), options=runtime.init_compiler_options())


def _param_delta_norm(new, old):
    return optax.tree.norm(jax.tree.map(jnp.subtract, new, old))


def _gather(logp_full, tokens):
    return jnp.take_along_axis(logp_full, tokens[..., None], -1)[..., 0]


# --------------------------------------------------------------------------------------------
# token tasks
# --------------------------------------------------------------------------------------------
def _transformer(cfg: TokenConfig, key):
    return Transformer(cfg.V, cfg.H, cfg.d_model, cfg.heads, cfg.layers, cfg.ffn, rngs=nnx.Rngs(key))


def check_run_batch(run_batch) -> None:
    if run_batch is not None and (not isinstance(run_batch, int) or isinstance(run_batch, bool) or run_batch < 1):
        raise ValueError(f"run_batch must be None (every run vmapped at once) or an integer >= 1, got {run_batch!r}")


def _map_runs(one_run, carry, run_batch: int | None):
    """Advance every run: all vmapped at once (``run_batch=None``), or ``run_batch`` at a time, one batch after
    another inside the same program (``lax.map``). Same per-run computation either way; on a CPU where one run
    already keeps every core busy the batched form is faster (benchmarks/bench_train.py measures both).
    A single run is traced without ``vmap`` (the same computation): XLA compiles that program faster, with no run
    axis on its arrays."""
    if jax.tree.leaves(carry)[0].shape[0] == 1:
        return jax.tree.map(lambda x: x[None], one_run(jax.tree.map(lambda x: x[0], carry)))
    if run_batch is None:
        return jax.vmap(one_run)(carry)
    if run_batch == 1:  # lax.map's batch_size=1 would still vmap each run over an axis of size 1
        return jax.lax.map(one_run, carry)
    return jax.lax.map(one_run, carry, batch_size=run_batch)


def make_token_program(cfg: TokenConfig, run_batch: int | None = None) -> Program:
    """The program of a token-task configuration: compiled once per (``cfg.static``, ``run_batch``), bound to
    ``cfg.knobs``. ``run_batch``: how many runs are vmapped together (None: all of them); the batches run one
    after another inside the same program."""
    check_run_batch(run_batch)
    runtime.release_compiled()
    init_runs, chunk = _token_program(cfg.static, run_batch)
    return Program(init_runs=init_runs, chunk=chunk, knobs=cfg.knobs)


def token_parts(cfg: TokenConfig) -> dict:
    """The pieces one token-task episode of :func:`make_token_program` is built from, unjitted, for analyses and
    profiles that run them one at a time: ``init_one(key, knobs) -> state``, ``rollout(params, key, e, knobs) ->
    (batch, error)``, ``loss_fn(params, batch, knobs) -> (loss, tracked p)``, ``tx`` (the optimizer) and
    ``episode(state, e) -> (state, metrics)``. The program's chunk scans this ``episode``."""
    return dict(_token_parts(cfg.static))


# --------------------------------------------------------------------------------------------
# the sampling kinds of the token tasks (Method.sampling), one object each
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Sampling:
    """What one sampling kind of :class:`tpo_core.methods.Method` adds to an episode's batch.

    ``rollout(r, cfg)``: the entries from the rollout, ``r`` holding its arrays (``answers`` [B, n, H],
    ``logp_full_old`` [B, n, H, V], ``token_logp_old`` [B, n, H], ``rewards`` [B, n, H], ``scores`` [B, n],
    ``correct``, ``target`` [B, H] and a spare ``key``; n = K for groups, else 1); ``policy(logp_full, token_logp,
    batch)``: the entries from the policy being trained, for the loss. ``groups``: the batch is groups of K
    completions (a refill variant draws more of them; the engine tracks their p against TPO's q)."""

    rollout: Callable
    policy: Callable
    groups: bool = False


def _group_rollout(r, cfg):
    return dict(logp_old=r["token_logp_old"].sum(-1), scores=r["scores"], token_logp_old=r["token_logp_old"])


def _single_rollout(r, cfg):
    return dict(token_logp_old=r["token_logp_old"][:, 0], rewards=r["rewards"][:, 0])


def _candidates_rollout(r, cfg):
    """K i.i.d. candidates per state of the behaviour trajectory, candidate 0 = the behaviour token."""
    lp = r["logp_full_old"][:, 0]  # [B, H, V]
    extra = jax.random.categorical(r["key"], lp[:, :, None, :], shape=(cfg.B, cfg.H, cfg.K - 1))
    cand = jnp.concatenate([r["answers"][:, 0, :, None], extra], -1)  # [B, H, K]
    return dict(
        cand=cand,
        logp_old=jnp.take_along_axis(lp, cand, -1),
        scores=tasks.candidate_rewards(cand == r["target"][:, :, None], r["correct"][:, 0], cfg.reward),
    )


SAMPLINGS = {
    "group": Sampling(
        rollout=_group_rollout,
        groups=True,
        policy=lambda logp_full, token_logp, batch: dict(logp=token_logp.sum(-1), token_logp=token_logp),
    ),
    "single": Sampling(
        rollout=_single_rollout, policy=lambda logp_full, token_logp, batch: dict(token_logp=token_logp[:, 0])
    ),
    "token": Sampling(
        rollout=_candidates_rollout,
        policy=lambda logp_full, token_logp, batch: dict(logp=jnp.take_along_axis(logp_full[:, 0], batch["cand"], -1)),
    ),
}


NOISE_STREAM = 7  # fold_in index of the reward-noise key (its own stream: prompts and samples are unchanged)


@functools.lru_cache(maxsize=64)
def _token_program(cfg: TokenConfig, run_batch: int | None = None):
    parts = _token_parts(cfg)
    episode = parts["episode"]

    @functools.partial(runtime.TopLevelJit, static_argnums=2, options=runtime.chunk_compiler_options())
    def chunk(carry, start, n):
        def one_run(state):
            return jax.lax.scan(episode, state, start + jnp.arange(n))

        return _map_runs(one_run, carry, run_batch)

    return _init_runs(parts["init_one"]), chunk


@functools.lru_cache(maxsize=64)
def _token_parts(cfg: TokenConfig):
    spec = cfg.spec
    B, H, V, E = cfg.B, cfg.H, cfg.V, cfg.n_epochs
    n_samples = cfg.samples_per_prompt  # answers sampled per prompt: K (group methods) or 1 (single, token)
    sampling = SAMPLINGS[spec.sampling]  # the method's sampling kind, chosen once
    n_draw = spec.groups_drawn(B) if sampling.groups else B  # > B only for a refill variant
    n_track = min(cfg.track, B)
    tx = make_optimizer(cfg.optimizer)
    graphdef = nnx.graphdef(nnx.eval_shape(lambda: _transformer(cfg, jax.random.key(0))))

    def model(params):
        return nnx.merge(graphdef, nnx.State(params["model"]))

    def init_one(key, knobs):
        params = {"model": nnx.to_pure_dict(nnx.split(_transformer(cfg, key), nnx.Param)[1])}
        if spec.learned:
            params["learned"] = {name: jnp.zeros(()) for name in spec.learned}
        return dict(params=params, opt=with_lr(tx.init(params), knobs["lr"]), key=key, knobs=knobs)

    def rollout(params, key, e, knobs):
        kp, ksmp, kc = jax.random.split(jax.random.fold_in(key, e), 3)
        prompts = jax.random.randint(kp, (n_draw, H), 0, V)
        policy = model(params)
        answers, logp_full_old = policy.sample(prompts, ksmp, n_samples)  # [B, n_samples, H], [.., H, V]
        if cfg.old_logp == "teacher_forced":  # recompute with the loss's own forward (+1 forward per episode)
            logp_full_old = policy.answer_logprobs(prompts, answers)
        target = tasks.target_tokens(prompts, cfg.target, V)  # [B, H]
        correct = answers == target[:, None, :]
        rewards = tasks.token_rewards(correct, cfg.reward)  # [B, n_samples, H]
        scores = tasks.sequence_scores(rewards)  # [B, n_samples]
        token_logp_old = _gather(logp_full_old, answers)  # [B, n_samples, H]
        batch = dict(prompts=prompts, answers=answers)
        batch.update(
            sampling.rollout(
                dict(
                    answers=answers,
                    logp_full_old=logp_full_old,
                    token_logp_old=token_logp_old,
                    rewards=rewards,
                    scores=scores,
                    correct=correct,
                    target=target,
                    key=kc,
                ),
                cfg,
            )
        )
        if "scores" in batch:  # optional score noise (σ = reward_noise, 0 by default); error stays noiseless
            noise_key = jax.random.fold_in(jax.random.fold_in(key, e), NOISE_STREAM)
            noise = jax.random.normal(noise_key, batch["scores"].shape)
            batch["scores"] = batch["scores"] + knobs["reward_noise"] * noise
        if spec.refill:  # dynamic-sampling refill: the first B informative groups of the n_draw drawn
            idx, keep = methods.refill_select(batch["scores"], B)
            batch = dict({k: v[idx] for k, v in batch.items()}, keep=keep)
        return batch, tasks.error_rate(scores)  # error of every sampled completion (all n_draw groups)

    def loss_fn(params, batch, knobs):
        logp_full = model(params).answer_logprobs(batch["prompts"], batch["answers"])  # [B, n_samples, H, V]
        token_logp = _gather(logp_full, batch["answers"])
        b = dict(batch, learned=params.get("learned"))
        b.update(sampling.policy(logp_full, token_logp, batch))
        loss = spec.loss(b, knobs)
        if sampling.groups:  # p of the tracked groups (informative groups first)
            tracked = jax.nn.softmax(b["logp"][_tracked(batch["scores"])], -1)
        else:
            tracked = jnp.zeros((n_track, 1))
        return loss, tracked

    def _tracked(scores):
        return jnp.argsort(L.zero_variance(scores))[:n_track]

    def episode(state, e):
        knobs = state["knobs"]
        # The named scopes label the compiled program's operations (benchmarks/bench_train.py --ops reads them).
        with jax.named_scope("sampling"):
            batch, error = rollout(state["params"], state["key"], e, knobs)

        def epoch(carry, _):
            params, opt = carry
            with jax.named_scope("forward_backward"):
                (loss, p_track), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, knobs)
            with jax.named_scope("optimizer"):
                updates, opt = tx.update(grads, opt, params)
                step = optax.tree.norm(updates["model"])
                new_params = optax.apply_updates(params, updates)
            return (new_params, opt), (loss, optax.tree.norm(grads["model"]), step, p_track)

        (params, opt), (loss, gnorm, step, p_track) = jax.lax.scan(
            epoch, (state["params"], state["opt"]), None, length=E
        )
        with jax.named_scope("metrics"):
            metrics = dict(
                error=error,
                loss=loss[0],
                grad_norm=gnorm[0],
                grad_norm_last=gnorm[-1],
                step_norm=step[0],  # ‖Δθ‖ of the first epoch's update (Muon/Adam: not ∝ ‖∇L‖)
                update_norm=_param_delta_norm(params["model"], state["params"]["model"]),
            )  # whole episode
            if spec.refill:  # share of the B training groups that are informative (1 = the refill filled it)
                metrics["fill_frac"] = batch["keep"].astype(jnp.float32).mean()
            if "scores" in batch:  # group and token methods: group statistics and TPO's target
                s = batch["scores"].reshape(-1, batch["scores"].shape[-1])
                lo = batch["logp_old"].reshape(s.shape)
                zero = L.zero_variance(s)
                q = L.tpo_target(lo, s, knobs["eta"], std_floor=knobs["std_floor"])
                good = (s > s.mean(-1, keepdims=True)).astype(jnp.float32)
                informative = (~zero).astype(jnp.float32)
                p_old = jax.nn.softmax(lo, -1)
                metrics.update(
                    zero_var_frac=zero.mean(),
                    # means over all groups, as the PyTorch bridge logs tpo/entropy_p_old and tpo/tv
                    entropy_p_old=-(p_old * jax.nn.log_softmax(lo, -1)).sum(-1).mean(),
                    tv=0.5 * jnp.abs(q - p_old).sum(-1).mean(),
                    success_mass=((q * good).sum(-1) * informative).sum() / jnp.maximum(informative.sum(), 1.0),
                    success_mass_old=((jax.nn.softmax(lo, -1) * good).sum(-1) * informative).sum()
                    / jnp.maximum(informative.sum(), 1.0),
                )
                if sampling.groups and n_track:
                    idx = _tracked(s)
                    metrics.update(
                        track_q=q[idx],
                        track_p=jnp.moveaxis(p_track, 0, 1),  # p: [n_track, epochs, K]
                        track_scores=s[idx],
                        track_informative=~zero[idx],
                    )
            else:
                metrics.update(
                    {
                        k: jnp.zeros(())
                        for k in ("zero_var_frac", "success_mass", "success_mass_old", "entropy_p_old", "tv")
                    }
                )
        return dict(state, params=params, opt=opt), metrics

    return dict(init_one=init_one, rollout=rollout, loss_fn=loss_fn, tx=tx, episode=episode)


# --------------------------------------------------------------------------------------------
# MNIST contextual bandit
# --------------------------------------------------------------------------------------------
def make_bandit_program(cfg: BanditConfig, dataset, run_batch: int | None = None) -> Program:
    """The program of a bandit configuration on ``dataset``: compiled once per (``cfg.static``, dataset,
    ``run_batch``); ``run_batch`` as in :func:`make_token_program`."""
    check_run_batch(run_batch)
    runtime.release_compiled()
    init_runs, chunk, data = _bandit_program(cfg.static, dataset, run_batch)
    return Program(
        init_runs=init_runs, chunk=chunk, knobs=cfg.knobs, data=data, unit=f"blocks of {cfg.eval_every} steps"
    )


@functools.lru_cache(maxsize=32)
def _bandit_program(cfg: BanditConfig, dataset, run_batch: int | None = None):
    spec = methods.get(cfg.method)
    in_dim = dataset.x_train.shape[1]
    tx = optax.inject_hyperparams(optax.adam)(learning_rate=1e-3)
    graphdef = nnx.graphdef(nnx.eval_shape(lambda: MLP(in_dim, cfg.hidden, 10, rngs=nnx.Rngs(0))))

    def model(params):
        return nnx.merge(graphdef, nnx.State(params))

    def init_one(key, knobs):
        params = nnx.to_pure_dict(nnx.split(MLP(in_dim, cfg.hidden, 10, rngs=nnx.Rngs(key)), nnx.Param)[1])
        return dict(params=params, opt=with_lr(tx.init(params), knobs["lr"]), key=key, knobs=knobs)

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
            return spec.bandit(model(params)(x), actions, y, adv, state["knobs"])

        loss, grads = jax.value_and_grad(loss_fn)(state["params"])
        updates, opt = tx.update(grads, state["opt"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        metrics = dict(
            train_error=1.0 - reward.mean(),
            loss=loss,
            grad_norm=optax.tree.norm(grads),
            step_norm=optax.tree.norm(updates),
        )
        return dict(state, params=params, opt=opt), metrics

    def block(state, b, x_train, y_train, x_test, y_test):
        steps = b * cfg.eval_every + jnp.arange(cfg.eval_every)
        state, m = jax.lax.scan(lambda st, s: step(st, s, x_train, y_train), state, steps)
        greedy = model(state["params"])(x_test).argmax(-1)
        out = {k: v.mean() for k, v in m.items()}
        out["test_error"] = (greedy != y_test).mean()
        return state, out

    @functools.partial(runtime.TopLevelJit, static_argnums=2, options=runtime.chunk_compiler_options())
    def chunk(carry, start, n, x_train, y_train, x_test, y_test):
        def one_run(state):
            return jax.lax.scan(
                lambda st, b: block(st, b, x_train, y_train, x_test, y_test), state, start + jnp.arange(n)
            )

        return _map_runs(one_run, carry, run_batch)

    data = tuple(jnp.asarray(a) for a in (dataset.x_train, dataset.y_train, dataset.x_test, dataset.y_test))
    return _init_runs(init_one), chunk, data


runtime.register_cache(_clear_programs)


# --------------------------------------------------------------------------------------------
# convenience: whole runs
# --------------------------------------------------------------------------------------------
def _train(cfg, dataset, seeds, chunk_size=None, callback=None, sweep=None, run_batch=None) -> dict:
    """:func:`train_tokens` (``dataset`` None) or :func:`train_bandit`: the sweep and memory checks, one compiled
    program, run to the end; metrics [S, n, ...], or [P, S, n, ...] for a sweep."""
    points = check_sweep(cfg, sweep) if sweep else None
    if dataset is None:
        check_run_memory(cfg, len(seeds), len(points) if points else 1, run_batch)
        program, n = make_token_program(cfg, run_batch), cfg.episodes
    else:
        program, n = make_bandit_program(cfg, dataset, run_batch), cfg.steps // cfg.eval_every
    parts = []
    for done, m in program.run(seeds, n, chunk_size, points):
        if callback:
            callback(done, m)
        parts.append(m)
    out = {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}
    return out if points is None else by_point(out, len(points), len(seeds))


def train_tokens(
    cfg: TokenConfig,
    seeds: Sequence[int] = (0,),
    chunk_size: int | None = None,
    callback: Callable | None = None,
    sweep: dict | None = None,
    run_batch: int | None = None,
) -> dict:
    """Run ``cfg`` for every seed; returns metrics as numpy arrays [S, episodes, ...].

    ``sweep={"eta": [0.25, 0.5, 1, 2, 4]}`` (any of ``cfg.knobs``; several keys are zipped) runs every
    value × seed in one compiled program and returns metrics [P, S, episodes, ...]. ``run_batch``: runs
    vmapped together (None: all, what an accelerator wants; on a CPU whose cores one run already fills, a small
    ``run_batch`` avoids batching every product over the runs). ``chunk_size`` episodes per compiled chunk
    (default: :func:`chunk_plan`'s); ``callback(done, metrics)`` after each chunk, with its metrics."""
    return _train(cfg, None, seeds, chunk_size, callback, sweep, run_batch)


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB" if n < 2**40 else f"{n / 2**40:.3g} TiB"


def check_run_memory(cfg: TokenConfig, n_seeds: int, n_points: int = 1, run_batch: int | None = None) -> None:
    """:func:`check_memory` for ``n_seeds`` seeds × ``n_points`` sweep values, ``run_batch`` of them vmapped
    together (None: all), as :func:`train_tokens` runs them."""
    n_runs = n_seeds * n_points
    check_memory(cfg, n_runs if run_batch is None else min(run_batch, n_runs), n_seeds=n_seeds)


def check_memory(cfg: TokenConfig, n_runs: int, n_seeds: int | None = None, available: int | None = None) -> None:
    """Refuse, before anything is compiled, a configuration whose :meth:`TokenConfig.memory_floor_bytes`
    for ``n_runs`` runs vmapped together exceeds the memory available (``available`` bytes, default
    :func:`runtime.available_memory_bytes`; unknown memory is not checked). ``ValueError`` names B, K, H, the
    seeds and both figures."""
    available = runtime.available_memory_bytes() if available is None else available
    need = cfg.memory_floor_bytes(n_runs)
    if available is not None and need > available:
        seeds = n_seeds if n_seeds is not None else n_runs
        raise ValueError(
            f"B={cfg.B}, K={cfg.K}, H={cfg.H} with {seeds} seed(s) ({n_runs} run(s) at once) needs at least "
            f"{_gib(need)} for one training step but {_gib(available)} is available: lower B, K, H, the seeds, "
            f"or run_batch"
        )


def train_bandit(cfg: BanditConfig, dataset, seeds: Sequence[int] = (0,), **options) -> dict:
    """Run the bandit on ``dataset`` (``tpo_core.lab.mnist.load()``) for every seed; metrics
    [S, steps // eval_every] (test error after each block), or [P, S, ...] with ``sweep`` (keys from ``cfg.knobs``:
    eta, lr). ``options``: ``chunk_size``, ``callback``, ``sweep`` and ``run_batch``, as in :func:`train_tokens`."""
    if dataset is None:
        raise ValueError("dataset must be the bandit's images and labels (tpo_core.lab.mnist.load()), got None")
    return _train(cfg, dataset, seeds, **options)
