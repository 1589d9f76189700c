"""Models, tasks, data and the jitted training loops."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import tpo_core
from tpo_core import runtime, tasks, train
from tpo_core.config import BanditConfig, TokenConfig
from tpo_core.lab import mnist
from tpo_core.lab.reproduce.presets import SMOKE_MODEL, SMOKE_TASK
from tpo_core.models import Transformer, count_params
from tpo_core.train import chunk_plan, make_token_program, muon_adamw, train_bandit, train_tokens

TINY = dict(H=3, B=8, K=4, episodes=3, d_model=16, heads=2, layers=1, ffn=32)
# The reproduction presets' smoke shape, streamed one episode per chunk as their runner does: a test at this
# shape reuses the program test_reproduce.py compiled (the suite shares one persistent compile cache: tests/conftest.py).
SMOKE = dict(SMOKE_MODEL, **SMOKE_TASK, track=0)


@contextlib.contextmanager
def _count_compiles():
    """Count XLA backend compilations inside the block (jax.monitoring's compile-duration event)."""
    events = []

    def listener(name, *args, **kwargs):
        if name == "/jax/core/compile/backend_compile_duration":
            events.append(name)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield lambda: len(events)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


# ---- model ----------------------------------------------------------------------------------------
def test_transformer_matches_the_paper_size():
    shapes = nnx.eval_shape(lambda: Transformer(2, 10, rngs=nnx.Rngs(0)))
    assert count_params(nnx.state(shapes, nnx.Param)) == 101_634  # "about 101.6k parameters at V = 2"


def _jitted(model, name, **static):
    graphdef, state = nnx.split(model)
    fn = jax.jit(lambda st, *args: getattr(nnx.merge(graphdef, st), name)(*args, **static))
    return lambda *args: fn(state, *args)


def test_shared_prompt_kv_paths_equal_full_recompute():
    model = Transformer(3, 5, d_model=32, heads=2, layers=2, ffn=64, rngs=nnx.Rngs(1))
    prompts = jax.random.randint(jax.random.key(0), (4, 5), 0, 3)
    answers, logp_sampling = _jitted(model, "sample", k=6)(prompts, jax.random.key(1))
    assert answers.shape == (4, 6, 5) and logp_sampling.shape == (4, 6, 5, 3)
    full = _jitted(model, "full_sequence_logprobs")(prompts, answers)  # whole buffer per candidate, no sharing
    np.testing.assert_allclose(_jitted(model, "answer_logprobs")(prompts, answers), full, atol=2e-5)
    np.testing.assert_allclose(logp_sampling, full, atol=2e-5)


def test_teacher_forced_gradients_equal_full_recompute():
    """The training pass (shared prompt, answer products with their own gradient rules) has the gradients of
    the whole-buffer path, which uses neither, for every parameter."""
    model = Transformer(3, 5, d_model=32, heads=2, layers=2, ffn=64, rngs=nnx.Rngs(1))
    prompts = jax.random.randint(jax.random.key(0), (4, 5), 0, 3)
    answers = jax.random.randint(jax.random.key(1), (4, 6, 5), 0, 3)
    weights = jax.random.normal(jax.random.key(2), (4, 6, 5, 3))
    graphdef, state = nnx.split(model)

    def grads(name):
        def loss(st):
            return jnp.sum(weights * getattr(nnx.merge(graphdef, st), name)(prompts, answers))

        return jax.jit(jax.grad(loss))(state)

    got, want = grads("answer_logprobs"), grads("full_sequence_logprobs")
    scale = max(float(jnp.abs(w).max()) for w in jax.tree.leaves(want))
    assert scale > 0.1
    for (path, g), w in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want)):
        # the key bias's gradient is 0 in exact arithmetic (it shifts a query's scores by one constant)
        tol = 1e-4 * max(float(jnp.abs(w).max()), 1e-3 * scale)
        np.testing.assert_allclose(g, w, atol=tol, err_msg=str(path))


def test_attention_products_have_the_plain_products_gradients():
    """models._mm_nt / _mm_nn only choose operand layouts: values and gradients (also under vmap) are those
    of the einsums they replace."""
    from tpo_core.models import _mm_nn, _mm_nt

    ks = jax.random.split(jax.random.key(3), 4)
    a, b = jax.random.normal(ks[0], (2, 3, 7, 5)), jax.random.normal(ks[1], (2, 3, 9, 5))
    w = jax.random.normal(ks[2], (2, 3, 7, 9))

    def plain_nt(a, b):
        return jnp.einsum("...me,...ne->...mn", a, b)

    def plain_nn(a, b):
        return jnp.einsum("...mn,...ne->...me", a, b)

    for mine, plain, args in ((_mm_nt, plain_nt, (a, b)), (_mm_nn, plain_nn, (w, b))):
        cot = jax.random.normal(ks[3], plain(*args).shape)
        for f in (lambda g: g, jax.vmap):
            np.testing.assert_allclose(f(mine)(*args), plain(*args), rtol=1e-5, atol=1e-5)
            vjp_mine = jax.vjp(f(mine), *args)[1](cot)
            vjp_plain = jax.vjp(f(plain), *args)[1](cot)
            for m, p in zip(vjp_mine, vjp_plain):
                np.testing.assert_allclose(m, p, rtol=1e-5, atol=1e-5)


def test_sampling_follows_the_policy():
    """Empirical frequency of the first answer token matches the model's probability."""
    model = Transformer(2, 3, d_model=16, heads=2, layers=1, ffn=32, rngs=nnx.Rngs(2))
    prompts = jnp.zeros((1, 3), jnp.int32)
    answers, logp = _jitted(model, "sample", k=4000)(prompts, jax.random.key(3))
    freq = (answers[0, :, 0] == 1).mean()
    np.testing.assert_allclose(freq, np.exp(logp[0, 0, 0, 1]), atol=0.03)


def test_optimizer_routing_matches_the_reference_model():
    """The reference's linen model (d=64, 2 heads, 2 layers, FFN 256, V=2, H=10) has these parameters; optax
    routes each by rank: Muon on 2-D arrays, AdamW on the rest. Its SelfAttention keeps q/k/v biases as
    separate [heads, head_dim] arrays, so they are Muon's."""
    d, h, hd, ffn, V, T = 64, 2, 32, 256, 2, 20
    layer = (
        [(d, h, hd)] * 3
        + [(h, hd)] * 3
        + [(h, hd, d), (d,)]  # query/key/value kernel & bias, out
        + [(d,), (d,)] * 2
        + [(d, ffn), (ffn,), (ffn, d), (d,)]
    )  # two LayerNorms, FFN
    reference = [(V, d), (T, d)] + layer * 2 + [(d,), (d,), (d, V), (V,)]
    expect = {"muon": sorted(s for s in reference if len(s) == 2), "adamw": sorted(s for s in reference if len(s) != 2)}
    model = nnx.eval_shape(lambda: Transformer(2, 10, rngs=nnx.Rngs(0)))
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    ours = {"muon": [], "adamw": []}
    for x in jax.tree.leaves(params):
        ours["muon" if x.ndim == 2 else "adamw"].append(x.size)
    # our q/k/v kernels are one stacked [3, d, h, hd] array: compare parameter counts per optimizer
    assert (
        sum(ours["muon"])
        == sum(np.prod(s) for s in expect["muon"])
        == 2 * 3 * h * hd + 2 * 2 * d * ffn + V * d + T * d + d * V
    )
    assert sum(ours["adamw"]) == sum(np.prod(s) for s in expect["adamw"])
    assert sorted(ours["muon"]) == sorted(int(np.prod(s)) for s in expect["muon"])  # array by array, too


def test_muon_orthogonalises_matrices_and_adamw_steps_by_the_sign():
    """Closed forms, computed here independently of optax: Muon's first step on a matrix approximates the
    polar factor U Vᵀ of the gradient (Newton–Schulz flattens its spectrum); AdamW-Nesterov's first step is
    lr · sign(g) · (1 + 2β₁)/(1 + β₁) elementwise."""
    rng = np.random.default_rng(0)
    g = {
        "w": jnp.asarray(rng.normal(size=(16, 8)), jnp.float32),
        "b": jnp.asarray(rng.normal(size=(8,)), jnp.float32),
        "k": jnp.asarray(rng.normal(size=(2, 3, 4)), jnp.float32),
    }
    params = jax.tree.map(jnp.zeros_like, g)
    lr = 1e-2
    tx = muon_adamw(lr)
    upd, _ = tx.update(g, tx.init(params), params)
    b1 = 0.9
    for k in ("b", "k"):
        np.testing.assert_allclose(upd[k], -lr * np.sign(g[k]) * (1 + 2 * b1) / (1 + b1), rtol=1e-4)
    u, _, vt = np.linalg.svd(np.asarray(g["w"]), full_matrices=False)
    polar = u @ vt
    w = -np.asarray(upd["w"]) / lr
    cos = (w * polar).sum() / (np.linalg.norm(w) * np.linalg.norm(polar))
    assert cos > 0.95, cos
    sv, sv_g = np.linalg.svd(w, compute_uv=False), np.linalg.svd(np.asarray(g["w"]), compute_uv=False)
    assert sv_g.max() / sv_g.min() > 3 and sv.max() / sv.min() < 2, (sv, sv_g)  # the spectrum is flattened
    assert not np.allclose(w, np.sign(np.asarray(g["w"])) * (1 + 2 * b1) / (1 + b1), atol=0.1)  # not Adam's


def test_the_learning_rate_is_traced_and_scales_every_step():
    """lr lives in the optimizer state: doubling it doubles the first update (Muon and Adam are linear in
    lr) and does not compile a new program."""
    cfg = TokenConfig(**dict(TINY, episodes=1, epochs=1))
    a = train_tokens(cfg, seeds=(0,))
    with _count_compiles() as n:
        b = train_tokens(cfg.replace(lr=2e-3), seeds=(0,))
    assert n() == 0
    np.testing.assert_allclose(b["step_norm"], 2 * a["step_norm"], rtol=1e-4)
    np.testing.assert_allclose(b["grad_norm"], a["grad_norm"], rtol=1e-6)  # same θ at the first epoch


# ---- tasks ----------------------------------------------------------------------------------------
def test_targets_and_rewards():
    p = jnp.array([[0, 1, 1]])
    np.testing.assert_array_equal(tasks.target_tokens(p, "copy", 2), [[0, 1, 1]])
    np.testing.assert_array_equal(tasks.target_tokens(p, "flip", 2), [[1, 0, 0]])
    np.testing.assert_array_equal(tasks.target_tokens(p, "reverse_copy", 2), [[1, 1, 0]])
    np.testing.assert_array_equal(tasks.target_tokens(p, "reverse_flip", 4), [[2, 2, 3]])
    correct = jnp.array([[True, False, True]])
    np.testing.assert_array_equal(tasks.token_rewards(correct, "bag"), [[1, 0, 1]])
    np.testing.assert_array_equal(tasks.token_rewards(correct, "sequential"), [[1, 0, 0]])
    np.testing.assert_array_equal(tasks.token_rewards(correct, "terminal"), [[0, 0, 0]])
    np.testing.assert_array_equal(tasks.token_rewards(jnp.array([[True] * 3]), "terminal"), [[1, 1, 1]])
    cand = jnp.array([[[True, False], [True, True], [False, True]]])  # [B=1, H=3, K=2]
    np.testing.assert_array_equal(tasks.candidate_rewards(cand, correct, "sequential"), [[[1, 0], [1, 1], [0, 0]]])


# ---- training loops -------------------------------------------------------------------------------
def test_same_seed_same_metrics_and_vmapped_equals_sequential():
    cfg = TokenConfig(**TINY)
    both = train_tokens(cfg, seeds=(0, 1))
    again = train_tokens(cfg, seeds=(0, 1))
    for k in both:
        np.testing.assert_array_equal(both[k], again[k])
    one = train_tokens(cfg, seeds=(1,))
    # same program semantics; a vmapped matmul may round differently, and Muon's Newton–Schulz amplifies that
    # over episodes (1e-6 at the first episode, ~1e-3 by the third)
    for k in ("error", "loss", "grad_norm"):
        np.testing.assert_allclose(both[k][1, 0], one[k][0, 0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(both[k][1], one[k][0], rtol=2e-2, atol=1e-4)
    assert not np.allclose(both["loss"][0], both["loss"][1])  # different seeds differ


def test_streamed_chunks_equal_one_run():
    cfg = TokenConfig(**dict(TINY, episodes=4))
    whole = train_tokens(cfg, seeds=(0,))
    chunks = []
    streamed = train_tokens(cfg, seeds=(0,), chunk_size=2, callback=lambda done, m: chunks.append(done))
    assert chunks == [2, 4]
    np.testing.assert_allclose(streamed["loss"], whole["loss"], rtol=1e-5)
    assert chunk_plan(300, 50) == 50 and chunk_plan(7, 50) == 7 and chunk_plan(100, 30) == 25


@pytest.mark.parametrize("method", [m for m in tpo_core.TOKEN_METHODS])
def test_every_method_trains_on_token_tasks(method):
    spec = tpo_core.get_method(method)
    reward = "bag" if spec.dense_only else "terminal"
    m = train_tokens(TokenConfig(method=method, reward=reward, **dict(SMOKE, episodes=2)), seeds=(0,), chunk_size=1)
    assert m["error"].shape == (1, 2)
    for k in ("error", "loss", "grad_norm"):
        assert np.all(np.isfinite(m[k])), (method, k)
    assert np.all((m["error"] >= 0) & (m["error"] <= 1))


@pytest.mark.parametrize("old_logp", ["sampling", "teacher_forced"])
def test_all_fail_batch_gives_tpo_no_first_epoch_gradient(old_logp):
    """With V large every group fails, u = 0 and q = p_old: TPO's first-epoch gradient is zero up to the
    float difference between the rollout's and the loss's log-probs (typical gradients are O(1))."""
    cfg = TokenConfig(**dict(TINY, V=512, H=6, episodes=2, old_logp=old_logp))
    m = train_tokens(cfg, seeds=(0,))
    assert np.all(m["zero_var_frac"] == 1.0)
    assert np.all(m["grad_norm"] < 1e-4), m["grad_norm"]
    informative = train_tokens(TokenConfig(**dict(TINY, V=2, episodes=2, old_logp=old_logp)), seeds=(0,))
    assert np.all(informative["zero_var_frac"] < 1.0) and np.all(informative["grad_norm"] > 1e-2)


def test_tracked_groups_show_p_moving_toward_q():
    cfg = TokenConfig(H=3, B=32, K=8, episodes=30, d_model=32, layers=1, ffn=64, track=2)
    m = train_tokens(cfg, seeds=(0,))
    p, q, informative = m["track_p"][0], m["track_q"][0], m["track_informative"][0]  # [T, n, E, K], [T, n, K]
    assert p.shape == (30, 2, 4, 8) and q.shape == (30, 2, 8)
    kl = (q[:, :, None] * (np.log(q[:, :, None] + 1e-12) - np.log(p + 1e-12))).sum(-1)  # [T, n, E]
    sel = informative.astype(bool)
    assert sel.any()
    assert kl[sel][:, -1].mean() < kl[sel][:, 0].mean()  # on average the last epoch is closer to q
    assert np.mean(kl[sel][:, -1] < kl[sel][:, 0]) > 0.6  # and for most tracked groups


@pytest.mark.slow
def test_tpo_learns_terminal_reverse_copy_at_small_h():
    # a one-layer d=32 Transformer (the book's chapter 3 size), 3 seeds, 120 episodes; the paper's d=64 two-layer
    # model took 3x as long here for the same check
    cfg = TokenConfig(H=3, B=64, K=8, episodes=120, d_model=32, heads=2, layers=1, ffn=64, track=0)
    m = train_tokens(cfg, seeds=(0, 1, 2))
    chance = 1 - 2.0**-3
    late = m["error"][:, -30:].mean(1)
    assert m["error"][:, :10].mean() > 0.6  # starts near chance (0.875)
    # Measured (2026-12-01): the first 10 episodes 0.86, 0.78, 0.76; the last 30 episodes 21 %, 0.2 %, 0.1 %.
    # Seeds differ a lot at this budget, so: every seed well below chance, and at least one solved.
    assert np.all(late < 0.7 * chance) and late.min() < 0.05, late


# ---- MNIST ----------------------------------------------------------------------------------------
def _write_idx(path, array):
    import gzip
    import struct

    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape)
    path.write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))


def test_mnist_loader_parses_idx_verifies_checksums_and_splits_a_test_set_only_folder(tmp_path, monkeypatch, capsys):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (10_000, 28, 28))
    labels = rng.integers(0, 10, 10_000)
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", images)
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", labels)
    np.testing.assert_array_equal(mnist.read_idx(tmp_path / "t10k-labels-idx1-ubyte.gz"), labels)
    monkeypatch.setenv("TPO_CACHE_DIR", str(tmp_path / "cache"))
    ds = mnist.load(tmp_path, allow_download=False)
    assert "8,000 train / 2,000 test" in capsys.readouterr().err
    perm = np.random.default_rng(0).permutation(10_000)  # the documented split rule, recomputed here
    np.testing.assert_array_equal(ds.y_train, labels[perm[:8000]])
    np.testing.assert_array_equal(ds.y_test, labels[perm[8000:]])
    np.testing.assert_allclose(ds.x_test[0], images[perm[8000]].reshape(-1) / 255.0, rtol=1e-6)
    assert not mnist._md5_ok(tmp_path / "t10k-labels-idx1-ubyte.gz", "t10k-labels-idx1-ubyte")  # not the real file
    (tmp_path / "bad-idx").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="IDX"):
        mnist.read_idx(tmp_path / "bad-idx")


def test_mnist_loader_reads_the_real_test_set(capsys, shared_mnist):
    ds = mnist.load(shared_mnist)
    assert "8,000 train / 2,000 test" in capsys.readouterr().err
    all_labels = np.concatenate([ds.y_train, ds.y_test])
    np.testing.assert_array_equal(np.bincount(all_labels), [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009])


def test_mnist_falls_back_to_the_shipped_test_set(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TPO_DATA_DIR", str(tmp_path))  # an empty folder: no MNIST here
    monkeypatch.setenv("TPO_CACHE_DIR", str(tmp_path / "cache"))
    ds = mnist.load(allow_download=False)
    assert "shipped with tpo_core" in capsys.readouterr().err
    assert ds.x_train.shape == (8000, 784) and ds.x_test.shape == (2000, 784)


def test_bandit_tpo_learns_mnist():
    ds = mnist.load(verbose=False)  # real MNIST: the shipped test set when no other copy is here
    m = train_bandit(BanditConfig(method="tpo", steps=600, eval_every=200), ds, seeds=(0, 1))
    assert m["test_error"].shape == (2, 3)
    assert m["test_error"][:, -1].mean() < 0.15
    assert np.all(m["test_error"][:, -1] < m["test_error"][:, 0] + 0.02)


def test_bandit_entry_refuses_a_missing_dataset_and_forwards_its_options_to_the_checks():
    ds = mnist.load(verbose=False)
    with pytest.raises(ValueError, match="dataset"):
        train_bandit(BanditConfig(method="tpo", steps=2, eval_every=1), None)
    with pytest.raises(ValueError, match="sweep"):  # refused by the sweep check before anything is compiled
        train_bandit(BanditConfig(method="tpo", steps=2, eval_every=1), ds, sweep={"H": [3, 4]})
    with pytest.raises(TypeError):
        train_bandit(BanditConfig(method="tpo", steps=2, eval_every=1), ds, chunks=2)


@pytest.mark.skipif(runtime.memory_map_count() is None, reason="needs /proc/self/maps (Linux)")
def test_release_compiled_frees_the_memory_maps_of_compiled_programs():
    """Each compiled program holds ~1k memory maps; past vm.max_map_count the next compile crashes XLA."""
    cfg = TokenConfig(method="grpo", **dict(TINY, H=4))
    first = train_tokens(cfg, seeds=(0,))
    held = runtime.memory_map_count()
    assert runtime.release_compiled(force=True)
    assert held - runtime.memory_map_count() > 300
    again = train_tokens(cfg, seeds=(0,))  # recompiled from scratch: same numbers
    np.testing.assert_array_equal(first["loss"], again["loss"])


def _key_free(tree):
    return [
        np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
        for x in jax.tree.leaves(tree)
    ]


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the init programs' LLVM level is a CPU setting")
def test_init_programs_compiled_for_compile_speed_give_the_default_levels_bits():
    """The init program is compiled at LLVM level 1 with the fast-compile preset (it runs once); its parameters and
    optimizer state must be bit-identical to XLA's defaults (level 3, default preset), for the paper's Transformer
    (Table-3 size), the presets' smoke model and the MNIST MLP."""
    from tpo_core.config import BanditConfig
    from tpo_core.lab.mnist import Dataset
    from tpo_core.train import make_bandit_program

    rng = np.random.default_rng(0)
    images = Dataset(
        rng.random((32, 784), np.float32),
        rng.integers(0, 10, 32, np.int32),
        rng.random((8, 784), np.float32),
        rng.integers(0, 10, 8, np.int32),
        "synthetic",
    )
    programs = [
        make_token_program(TokenConfig(method="tpo", H=10)),  # the paper's Transformer, Table-3 size
        make_token_program(TokenConfig(method="grpo", **SMOKE)),  # the presets' smoke model
        make_bandit_program(BanditConfig(method="tpo"), images),
    ]
    emitters = {"xla_cpu_use_fusion_emitters": True}  # XLA's CPU default (the suite's flags turn it off)
    for program in programs:
        keys = runtime.seed_keys([0, 1, 2])
        knobs = {k: jnp.full((3,), v, jnp.float32) for k, v in program.knobs.items()}
        lowered = program.init_runs.lower(keys, knobs)
        fast = lowered.compile({**runtime.INIT_COMPILER_OPTIONS, **emitters})(keys, knobs)
        default = lowered.compile(
            {"xla_backend_optimization_level": 3, "xla_cpu_opt_preset": "CPU_OPT_PRESET_DEFAULT", **emitters}
        )(keys, knobs)
        for a, b in zip(_key_free(fast), _key_free(default), strict=True):
            np.testing.assert_array_equal(a, b)
        assert any(np.abs(a).max() > 0 for a in _key_free(fast))  # real parameters, not zeros


def test_init_compiler_options_leave_an_explicit_xla_flag_alone(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    expected = runtime.INIT_COMPILER_OPTIONS if jax.default_backend() == "cpu" else None
    assert runtime.init_compiler_options() == expected
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")  # e.g. the suite's fast-compile flags
    assert runtime.init_compiler_options() is None


def test_programs_are_keyed_on_shapes_not_on_knobs(monkeypatch):
    cfg = TokenConfig(method="tpo", **dict(TINY, H=5))
    same = make_token_program(
        cfg.replace(eta=0.3, lr=3e-3, beta=0.1, clip_eps=0.1, std_floor=0.01, reward_noise=0.5, episodes=7)
    )
    assert make_token_program(cfg).chunk is same.chunk  # one compiled program
    assert same.knobs["eta"] == 0.3 and make_token_program(cfg).knobs["eta"] == 1.0
    assert make_token_program(cfg.replace(K=6)).chunk is not same.chunk  # a shape is a key
    if runtime.memory_map_count() is not None:
        monkeypatch.setattr(runtime, "MAP_BUDGET_FRACTION", 0.0)  # as if at the limit: every call frees first
        assert make_token_program(cfg).chunk is not make_token_program(cfg).chunk


def test_changing_knobs_or_seeds_at_a_compiled_shape_does_not_compile():
    cfg = TokenConfig(method="grpo", **dict(TINY, H=4, episodes=2))
    base = train_tokens(cfg, seeds=(0, 1))
    with _count_compiles() as n:
        for change in (
            dict(eta=0.5),
            dict(lr=3e-3),
            dict(beta=0.1),
            dict(clip_eps=0.1),
            dict(std_floor=0.1),
            dict(reward_noise=0.1),
            dict(episodes=4),
        ):  # episodes: same chunk length, more chunks
            other = train_tokens(cfg.replace(**change), seeds=(2, 3), chunk_size=2)
    assert n() == 0, "a knob or the seeds triggered a compile"
    assert other["error"].shape == (2, 4) and not np.allclose(other["loss"][:, :2], base["loss"])


def test_an_eta_sweep_is_one_program_equal_to_separate_runs():
    etas = [0.25, 0.5, 1.0, 2.0, 4.0]
    cfg = TokenConfig(method="tpo", **dict(TINY, episodes=3))
    # Seeds 0 and 2: every episode has an informative group, so every update follows a real gradient. (Seed 1's
    # first episodes are all-fail: their gradient is rounding noise, 0 in one program and ~1e-9 in the other, and
    # Muon normalises the noise into a step whose direction is those last bits, so the two runs part ways after
    # it; that is the optimizer's behaviour, not the sweep's, and CI saw it as a 2.2e-4 difference.)
    swept = train_tokens(cfg, seeds=(0, 2), sweep={"eta": etas})
    assert swept["loss"].shape == (5, 2, 3)
    assert np.all(swept["zero_var_frac"] < 1), swept["zero_var_frac"]
    for i, eta in enumerate(etas):
        alone = train_tokens(cfg.replace(eta=eta), seeds=(0, 2))
        for k in ("error", "loss", "grad_norm", "success_mass"):
            np.testing.assert_allclose(swept[k][i], alone[k], rtol=2e-4, atol=2e-6, err_msg=f"{k} at eta={eta}")
    loss = swept["loss"]  # [η, seed, episode]: a neighbouring η or another seed lies far outside that tolerance
    for a, b in ((loss[0, 0], loss[1, 0]), (loss[3, 0], loss[4, 0]), (loss[2, 0], loss[2, 1])):
        assert np.max(np.abs(a - b) / np.abs(b)) > 10 * 2e-4
    assert not np.allclose(swept["success_mass"][0], swept["success_mass"][-1])  # η changes q
    with pytest.raises(ValueError, match="eta"):
        train_tokens(cfg, sweep={"eta": [1.0, -1.0]})
    with pytest.raises(ValueError, match="sweep"):
        train_tokens(cfg, sweep={"H": [3, 4]})
    with pytest.raises(ValueError, match="same length"):
        train_tokens(cfg, sweep={"eta": [1.0, 2.0], "lr": [1e-3]})


def test_step_norm_stays_normal_size_on_an_all_fail_batch():
    """Muon/Adam normalise the gradient: an all-fail TPO batch has ‖∇L‖ ≈ 0 on the first epoch, yet the
    parameters still move by a normal-size step (what vanishes is the gradient, not the step)."""
    fail = train_tokens(TokenConfig(**dict(TINY, V=512, H=6, episodes=1, epochs=1)), seeds=(0,))
    assert fail["zero_var_frac"][0, 0] == 1.0 and fail["grad_norm"][0, 0] < 1e-4
    assert fail["step_norm"][0, 0] > 1e-3, fail["step_norm"]
    np.testing.assert_allclose(fail["update_norm"], fail["step_norm"], rtol=1e-5)  # one epoch: one step


def test_the_compiled_episode_labels_its_phases_for_the_op_profile():
    """benchmarks/bench_train.py --ops sums XLA's kernel times by the named scopes of the episode: every phase
    must reach the optimized program, and the benchmark's mapping must give every instruction a phase."""
    import re

    cfg = TokenConfig(method="tpo", **TINY)
    program = make_token_program(cfg)
    carry = program.init([0])
    hlo = program.chunk.lower(carry, 0, 1).compile().as_text()
    names = set(re.findall(r'op_name="([^"]*)"', hlo))
    for phase in ("sampling", "forward_backward", "optimizer", "metrics"):
        assert any(f"/{phase}/" in n for n in names), f"no operation of the compiled episode is labelled {phase}"
    from benchmarks import bench_train as bench

    phases = bench.phases_of_instructions(hlo)
    instructions = set(re.findall(r"^\s*(?:ROOT )?%?([\w.\-]+) = ", hlo, re.M))
    assert instructions <= set(phases)
    assert set(phases.values()) >= {"sampling", "forward_backward", "optimizer", "metrics"}
    assert bench.kernel_kind("ynn_fusion.12") == "matrix products"
    assert bench.kernel_kind("copy_bitcast_fusion.3") == "layout copies / transposes"


def test_the_compile_profile_finds_every_stage_of_xla_and_leaves_the_cache_setting_alone(capsys):
    """benchmarks/bench_train.py --compile reads XLA's compile stages from the profiler by name: each must be
    found in a cold compile (a renamed span would print "n/a" and record None), the stages are parts of the whole,
    LLVM compiled some kernels, every compared setting compiles and runs, and the persistent-cache setting is
    restored."""
    from benchmarks import bench_train as bench

    before = jax.config.jax_enable_compilation_cache
    got = bench.compile_profile(
        TokenConfig(method="tpo", **TINY), settings=("default", "tpo_core", "level1"), episodes=1, rounds=1
    )
    out = capsys.readouterr().out
    assert jax.config.jax_enable_compilation_cache == before
    assert "n/a" not in out, out
    stage = dict(got["stages_s"])
    assert set(stage) == {title for title, _ in bench.COMPILE_STAGES} and None not in stage.values(), stage
    whole = stage.pop("XLA's whole compile")
    assert 0 < sum(stage.values()) <= whole + 0.01, (stage, whole)
    assert got["llvm_kernels"] > 0
    assert set(got["settings"]) == {"default", "tpo_core", "level1"}
    for setting, v in got["settings"].items():
        assert v["compile_s"] > 0 and v["episode_best_s"] > 0, (setting, v)


def test_runs_in_batches_equal_all_runs_vmapped():
    """run_batch=b advances b runs at a time (lax.map over batches) inside one program: the same per-run numbers
    as vmapping every run at once, for seeds and sweep points alike, with a ragged last batch."""
    cfg = TokenConfig(method="tpo", **dict(TINY, episodes=2))
    seeds = (0, 2, 3)  # every episode informative (seed 1's all-fail start: see the η-sweep test above)
    together = train_tokens(cfg, seeds=seeds, sweep={"eta": [0.5, 2.0]})
    assert np.all(together["zero_var_frac"] < 1), together["zero_var_frac"]
    for run_batch in (1, 4):  # 6 runs: six batches of one; a batch of four and a ragged one of two
        batched = train_tokens(cfg, seeds=seeds, sweep={"eta": [0.5, 2.0]}, run_batch=run_batch)
        for k in ("error", "loss", "grad_norm", "success_mass"):
            np.testing.assert_allclose(batched[k], together[k], rtol=2e-4, atol=2e-6, err_msg=f"{k}, {run_batch}")
    loss = together["loss"]  # [η, seed, episode]
    for a, b in ((loss[0, 0], loss[0, 1]), (loss[0, 1], loss[0, 2]), (loss[0, 0], loss[1, 0])):
        assert np.max(np.abs(a - b) / np.abs(b)) > 10 * 2e-4  # another seed or η is far outside the tolerance
    assert make_token_program(cfg, 1).chunk is not make_token_program(cfg).chunk
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="run_batch"):
            make_token_program(cfg, bad)


def test_the_startup_profile_compiles_in_the_first_process_and_loads_in_the_second():
    """benchmarks/bench_train.py --startup: two fresh processes share one new persistent compile cache; the first
    writes the programs into it, the second loads them instead of compiling (it still traces and lowers them, so
    at this tiny size its figure drops by the XLA compile only)."""
    from benchmarks import bench_train as bench

    cold, cached = bench.startup_profile(dict(method="tpo", **dict(TINY, H=5)), episodes=2)
    assert cold["cache_files"] > 0  # the first process wrote its programs
    assert cached["cache_files"] == cold["cache_files"]  # the second found them all: nothing new written
    assert cached["compile"] < cold["compile"], (cold, cached)
    assert cold["episode"] > 0 and cached["episode"] > 0


def test_training_programs_compile_with_the_fast_compile_preset_and_agree_with_xla_defaults(monkeypatch):
    """On the CPU the training programs compile with XLA's fast-compile preset (runtime.CHUNK_COMPILER_OPTIONS), unless
    XLA_FLAGS chooses, and can still be traced inside a caller's jax.eval_shape (init program and chunk); two
    episodes' metrics agree with the same program compiled at XLA's defaults to float rounding, for the Transformer
    (the presets' smoke size) and the MNIST MLP."""
    from tpo_core import train
    from tpo_core.lab.mnist import Dataset
    from tpo_core.train import make_bandit_program

    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")  # sets neither the level nor the preset
    expected = runtime.CHUNK_COMPILER_OPTIONS if jax.default_backend() == "cpu" else None
    assert runtime.chunk_compiler_options() == expected
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_opt_preset=CPU_OPT_PRESET_DEFAULT")
    assert runtime.chunk_compiler_options() is None and runtime.init_compiler_options() is None
    monkeypatch.delenv("XLA_FLAGS")
    if jax.default_backend() != "cpu":
        pytest.skip("the preset is a CPU option; off the CPU the programs keep XLA's defaults")

    rng = np.random.default_rng(0)
    images = Dataset(
        rng.random((64, 784), np.float32),
        rng.integers(0, 10, 64, np.int32),
        rng.random((16, 784), np.float32),
        rng.integers(0, 10, 16, np.int32),
        "synthetic",
    )
    emitters = {"xla_cpu_use_fusion_emitters": True}  # XLA's CPU default (the suite's flags turn it off)
    defaults = {"xla_cpu_opt_preset": "CPU_OPT_PRESET_DEFAULT", "xla_backend_optimization_level": 3, **emitters}
    train._clear_programs()  # rebuild under these XLA_FLAGS
    try:
        programs = [
            make_token_program(TokenConfig(method="tpo", **SMOKE)),
            make_bandit_program(BanditConfig(method="tpo", eval_every=1), images),
        ]  # a block = one step
        for program in programs:
            carry = program.init([0, 1])
            keys = runtime.seed_keys([0, 1])
            knobs = {k: jnp.full((2,), v, jnp.float32) for k, v in program.knobs.items()}
            assert jax.tree.structure(
                jax.eval_shape(lambda k, p=program, kn=knobs: p.init_runs(k, kn), keys)
            ) == jax.tree.structure(carry)
            lowered = program.chunk.lower(carry, 0, 2, *program.data)
            assert dict(lowered._lowering._compiler_options_kvs) == runtime.CHUNK_COMPILER_OPTIONS
            # JAX refuses compiler options on a nested jit: inside a caller's trace the chunk is traced without them
            shapes = jax.eval_shape(lambda c, p=program: p.chunk(c, 0, 2, *p.data)[1], carry)
            assert shapes["loss"].shape == (2, 2)
            _, fast = lowered.compile({**runtime.CHUNK_COMPILER_OPTIONS, **emitters})(carry, 0, *program.data)
            _, default = lowered.compile(defaults)(carry, 0, *program.data)
            assert fast.keys() == default.keys()
            # Before the first update (episode 0's loss, gradient norm, error) the two differ by float rounding only.
            for name in sorted({"loss", "grad_norm", "error", "train_error"} & default.keys()):
                np.testing.assert_allclose(
                    np.asarray(fast[name])[:, 0], np.asarray(default[name])[:, 0], rtol=1e-5, atol=1e-6, err_msg=name
                )
            # After it, Adam's division by sqrt(v) and Muon's orthogonalisation magnify that rounding (XLA's own
            # LLVM level 2 moves update_norm by 2e-4 here too), so the rest agrees to 5e-3.
            for name in default:
                np.testing.assert_allclose(
                    np.asarray(fast[name], np.float64),
                    np.asarray(default[name], np.float64),
                    rtol=5e-3,
                    atol=1e-5,
                    err_msg=name,
                )
            assert float(np.abs(np.asarray(default["loss"])).max()) > 0
    finally:
        train._clear_programs()


def test_token_runs_log_entropy_of_p_old_and_tv_of_the_target_as_the_bridge_does():
    """H(p_old) and TV(q, p_old) of episode 0, rebuilt in numpy from the engine's own rollout (means over all
    groups, the definitions of torch_ops.tpo_diagnostics)."""
    cfg = TokenConfig(method="tpo", **dict(TINY, episodes=1, eta=0.5))
    program = tpo_core.make_token_program(cfg)
    carry = program.init([0])
    _, metrics = program.chunk(carry, 0, 1)
    state = jax.tree.map(lambda a: a[0], carry)
    batch, _ = jax.jit(tpo_core.train.token_parts(cfg)["rollout"])(state["params"], state["key"], 0, state["knobs"])
    lo = np.asarray(batch["logp_old"], np.float64)
    s = np.asarray(batch["scores"], np.float64)
    p_old = np.exp(lo - lo.max(-1, keepdims=True))
    p_old /= p_old.sum(-1, keepdims=True)
    c = s - s.mean(-1, keepdims=True)
    sigma = np.sqrt((c**2).mean(-1, keepdims=True))
    u = np.where(sigma > 1e-6, c / np.where(sigma > 1e-6, sigma, 1.0), c)
    q = p_old * np.exp(u / 0.5)
    q /= q.sum(-1, keepdims=True)
    h = -(p_old * np.log(p_old)).sum(-1).mean()
    tv = 0.5 * np.abs(q - p_old).sum(-1).mean()
    assert 0 < h <= np.log(cfg.K) + 1e-6
    np.testing.assert_allclose(float(metrics["entropy_p_old"][0, 0]), h, rtol=1e-4)
    np.testing.assert_allclose(float(metrics["tv"][0, 0]), tv, rtol=1e-3, atol=1e-6)
    assert (sigma[:, 0] > 1e-6).any() and tv > 0  # an informative group moved the target


@pytest.mark.parametrize("B, H, runs", [(32, 4, 1), (64, 6, 2)])
def test_memory_floor_is_below_what_xla_allocates(B, H, runs):
    """TokenConfig.memory_floor_bytes is a lower bound: at most the temporaries plus arguments XLA's
    memory analysis reports for one compiled episode of the same runs, and it grows with B·K and the runs."""
    cfg = TokenConfig(B=B, H=H, K=8, episodes=1)
    prog = train.make_token_program(cfg)
    ma = prog.chunk.lower(prog.init(list(range(runs))), 0, 1).compile().memory_analysis()
    floor = cfg.memory_floor_bytes(runs)
    assert 0 < floor <= ma.temp_size_in_bytes + ma.argument_size_in_bytes
    assert cfg.replace(B=2 * B).memory_floor_bytes(runs) == 2 * floor
    assert cfg.memory_floor_bytes(2 * runs) == 2 * floor


def test_check_memory_refuses_with_the_figures_and_passes_what_fits():
    cfg = TokenConfig(B=1000, H=10, K=8)
    need = cfg.memory_floor_bytes(4)
    train.check_memory(cfg, 4, available=need)  # exactly enough: allowed
    with pytest.raises(ValueError, match=r"B=1000, K=8, H=10 with 2 seed\(s\) \(4 run\(s\) at once\)"):
        train.check_memory(cfg, 4, n_seeds=2, available=need - 1)
