"""Models, tasks, data and the jitted training loops."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import tpo_core
from tpo_core import mnist, tasks
from tpo_core.config import BanditConfig, TokenConfig
from tpo_core.models import Transformer, count_params
from tpo_core.train import chunk_plan, make_token_program, muon_adamw, train_bandit, train_tokens

TINY = dict(H=3, B=8, K=4, episodes=3, d_model=16, heads=2, layers=1, ffn=32)


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


def test_sampling_follows_the_policy():
    """Empirical frequency of the first answer token matches the model's probability."""
    model = Transformer(2, 3, d_model=16, heads=2, layers=1, ffn=32, rngs=nnx.Rngs(2))
    prompts = jnp.zeros((1, 3), jnp.int32)
    answers, logp = _jitted(model, "sample", k=4000)(prompts, jax.random.key(3))
    freq = (answers[0, :, 0] == 1).mean()
    np.testing.assert_allclose(freq, np.exp(logp[0, 0, 0, 1]), atol=0.03)


def test_muon_on_matrices_adamw_elsewhere():
    params = {"w": jnp.ones((4, 3)), "b": jnp.ones((3,)), "k": jnp.ones((2, 2, 2))}
    grads = jax.tree.map(lambda x: jnp.arange(x.size, dtype=jnp.float32).reshape(x.shape) - 2.0, params)
    tx = muon_adamw(1e-3)
    upd, _ = tx.update(grads, tx.init(params), params)
    muon, adamw = optax.contrib.muon(1e-3), optax.adamw(1e-3, weight_decay=0.0, nesterov=True)
    expect_w, _ = muon.update({"w": grads["w"]}, muon.init({"w": params["w"]}), {"w": params["w"]})
    rest = {"b": params["b"], "k": params["k"]}
    expect_rest, _ = adamw.update({"b": grads["b"], "k": grads["k"]}, adamw.init(rest), rest)
    np.testing.assert_allclose(upd["w"], expect_w["w"], rtol=1e-6)
    np.testing.assert_allclose(upd["b"], expect_rest["b"], rtol=1e-6)
    np.testing.assert_allclose(upd["k"], expect_rest["k"], rtol=1e-6)
    assert not np.allclose(upd["w"], adamw.update({"w": grads["w"]}, adamw.init({"w": params["w"]}), {"w": params["w"]})[0]["w"])


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
    for k in ("error", "loss", "grad_norm"):
        np.testing.assert_allclose(both[k][1], one[k][0], rtol=1e-5, atol=1e-6)
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
    m = train_tokens(TokenConfig(method=method, reward=reward, **dict(TINY, episodes=2)), seeds=(0,))
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
    assert kl[sel][:, -1].mean() < kl[sel][:, 0].mean()      # on average the last epoch is closer to q
    assert np.mean(kl[sel][:, -1] < kl[sel][:, 0]) > 0.6     # and for most tracked groups


@pytest.mark.slow
def test_tpo_learns_terminal_reverse_copy_at_small_h():
    cfg = TokenConfig(H=3, B=64, K=8, episodes=200)
    m = train_tokens(cfg, seeds=(0, 1))
    chance = 1 - 2.0**-3
    assert m["error"][:, :10].mean() > 0.6                       # starts near chance (0.875)
    assert m["error"][:, -50:].mean() < 0.2 * chance, m["error"][:, -50:].mean(1)


# ---- MNIST ----------------------------------------------------------------------------------------
def test_mnist_loader_reads_the_real_test_set_and_splits_it(capsys):
    ds = mnist.load()
    err = capsys.readouterr().err
    assert "8,000 train / 2,000 test" in err and len(ds.y_train) == 8000 and len(ds.y_test) == 2000
    all_labels = np.concatenate([ds.y_train, ds.y_test])
    np.testing.assert_array_equal(np.bincount(all_labels), [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009])
    assert ds.x_train.shape[1] == 784 and 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0
    again = mnist.load(verbose=False)
    np.testing.assert_array_equal(again.y_test, ds.y_test)


def test_mnist_falls_back_to_sklearn_digits(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TPO_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TPO_CACHE_DIR", str(tmp_path / "cache"))
    ds = mnist.load(allow_download=False)
    assert "scikit-learn's 8x8 digits" in capsys.readouterr().err
    assert ds.x_train.shape[1] == 64


def test_bandit_tpo_learns_mnist():
    ds = mnist.load(verbose=False)
    m = train_bandit(BanditConfig(method="tpo", steps=600, eval_every=200), ds, seeds=(0, 1))
    assert m["test_error"].shape == (2, 3)
    assert m["test_error"][:, -1].mean() < 0.15
    assert np.all(m["test_error"][:, -1] < m["test_error"][:, 0] + 0.02)


@pytest.mark.skipif(tpo_core.train.memory_map_count() is None, reason="needs /proc/self/maps (Linux)")
def test_release_compiled_frees_the_memory_maps_of_compiled_programs():
    """Each compiled program holds ~1k memory maps; past vm.max_map_count the next compile crashes XLA."""
    from tpo_core import train

    cfg = TokenConfig(method="grpo", **dict(TINY, H=4))
    first = train_tokens(cfg, seeds=(0,))
    held = train.memory_map_count()
    assert train.release_compiled(force=True)
    assert held - train.memory_map_count() > 300
    again = train_tokens(cfg, seeds=(0,))          # recompiled from scratch: same numbers
    np.testing.assert_array_equal(first["loss"], again["loss"])


def test_programs_are_cached_until_the_map_budget_is_used(monkeypatch):
    from tpo_core import train

    cfg = TokenConfig(method="tpo", **dict(TINY, H=5))
    assert make_token_program(cfg) is make_token_program(cfg)
    if train.memory_map_count() is not None:
        monkeypatch.setattr(train, "MAP_BUDGET_FRACTION", 0.0)   # as if at the limit: every call frees first
        assert make_token_program(cfg) is not make_token_program(cfg)
