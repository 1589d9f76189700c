"""tpo_core.bridge.torch_ops against the JAX engine (tpo_core.losses) and against closed forms.

Two references, both computed without the code under test:
* float64: a JAX transcription of arXiv 2604.06159 §3 written here in f64 (``jax.enable_x64(True)`` only
  inside each test) and ``jax.grad`` of it; agreement to 1e-10. ``tpo_core.losses`` itself computes
  the target in float32 by design (``standardize`` casts), so it cannot be a 1e-10 reference;
* float32: ``tpo_core.losses.tpo_loss`` and ``jax.grad`` of it, agreement to 1e-5 (loss relative,
  gradient absolute; measured worst cases are ≈ 2e-6 at η = 1e-3).
"""

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the bridge needs PyTorch: pip install 'tpo_core[torch]'")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from tpo_core import losses as L  # noqa: E402
from tpo_core.bridge import torch_ops as T  # noqa: E402

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- an independent float64 reference (the paper's formulas, JAX) ----------------------------
def _ref_loss_f64(logp, logp_old, scores, eta, valid):
    """Mean over groups of -Σ q log p over the valid members; written from the formulas, not the bridge."""
    w = valid.astype(jnp.float64)
    n = w.sum(-1, keepdims=True)
    mean = (scores * w).sum(-1, keepdims=True) / n
    c = (scores - mean) * w
    sigma = jnp.sqrt((c**2).sum(-1, keepdims=True) / n)
    u = jnp.where(sigma > 1e-6, c / jnp.where(sigma > 1e-6, sigma, 1.0), c)
    neg = jnp.where(valid, 0.0, -jnp.inf)
    prior = jax.nn.log_softmax(jax.lax.stop_gradient(logp_old) + neg, axis=-1)
    q = jax.lax.stop_gradient(jax.nn.softmax(jnp.where(valid, prior + u / eta, -jnp.inf), axis=-1))
    log_p = jax.nn.log_softmax(logp + neg, axis=-1)
    return -jnp.where(valid, q * log_p, 0.0).sum(-1).mean()


@st.composite
def groups(draw, max_k=1024):
    seed = draw(st.integers(0, 2**31 - 1))
    k = draw(st.sampled_from([2, 3, 5, 8, 16, 64, 257, max_k]))
    g = draw(st.integers(1, 3))
    scale = draw(st.sampled_from([1.0, 30.0, 1e4]))
    eta = float(10 ** draw(st.floats(-3, 3)))
    kind = draw(st.sampled_from(["binary", "gauss", "zero_var", "mixed"]))
    masked = draw(st.booleans())
    rng = np.random.default_rng(seed)
    logp = rng.uniform(-scale, scale, (g, k))
    logp_old = np.clip(logp + rng.normal(0, 0.1 * scale, (g, k)), -1e4, 1e4)
    logp = np.clip(logp, -1e4, 1e4)
    if kind == "binary":
        scores = rng.integers(0, 2, (g, k)).astype(np.float64)
    elif kind == "gauss":
        scores = rng.normal(size=(g, k))
    elif kind == "zero_var":
        scores = np.full((g, k), rng.normal())
    else:  # some groups all-equal, some not
        scores = rng.integers(0, 2, (g, k)).astype(np.float64)
        scores[0] = 1.0
    valid = np.ones((g, k), bool)
    if masked:  # ragged groups padded to K: each keeps at least 2 members
        for row in valid:
            n_valid = rng.integers(2, k + 1)
            row[rng.permutation(k)[n_valid:]] = False
    return logp, logp_old, scores, eta, valid


def _torch_loss_and_grad(logp, logp_old, scores, eta, valid, dtype):
    x = torch.tensor(logp, dtype=dtype, requires_grad=True)
    loss = T.tpo_loss(
        x, torch.tensor(logp_old, dtype=dtype), torch.tensor(scores, dtype=dtype), eta, valid=torch.tensor(valid)
    )
    loss.backward()
    return loss.item(), x.grad.numpy()


@SETTINGS
@given(groups())
def test_float64_value_and_gradient_match_jax_to_1e_10(case):
    logp, logp_old, scores, eta, valid = case
    with jax.enable_x64(True):
        args = (jnp.asarray(logp), jnp.asarray(logp_old), jnp.asarray(scores), eta, jnp.asarray(valid))
        ref = float(_ref_loss_f64(*args))
        ref_grad = np.asarray(jax.grad(_ref_loss_f64)(*args))
    val, grad = _torch_loss_and_grad(logp, logp_old, scores, eta, valid, torch.float64)
    assert abs(val - ref) <= 1e-10 * max(1.0, abs(ref))
    np.testing.assert_allclose(grad, ref_grad, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(grad[~valid], 0.0)  # padded members get no gradient


@SETTINGS
@given(groups())
def test_float64_matches_the_jax_engine_where_the_engine_is_exact(case):
    """tpo_core.losses in x64 mode (its target is float32): agreement to float32 accuracy; unmasked groups."""
    logp, logp_old, scores, eta, _ = case
    with jax.enable_x64(True):
        args = (jnp.asarray(logp), jnp.asarray(logp_old), jnp.asarray(scores), eta)
        ref_grad = np.asarray(jax.grad(L.tpo_loss)(*args))
        q_engine = np.asarray(L.tpo_target(jnp.asarray(logp_old), jnp.asarray(scores), eta), np.float64)
    _, grad = _torch_loss_and_grad(logp, logp_old, scores, eta, np.ones_like(logp, bool), torch.float64)
    q_bridge = T.tpo_target(torch.tensor(logp_old), torch.tensor(scores), eta).numpy()
    g = logp.shape[0]
    # the gradient is (p·Σq - q)/G: the difference is the engine's float32 rounding of q (and of Σq = 1)
    f32_err = np.abs(q_bridge - q_engine).max() + np.abs(q_engine.sum(-1) - 1.0).max()
    np.testing.assert_allclose(grad, ref_grad, rtol=0, atol=f32_err / g + 1e-12)
    big = 1.0 + np.abs(np.log(np.maximum(q_bridge, 1e-300))).max()
    np.testing.assert_allclose(q_bridge, q_engine, rtol=0, atol=1e-5 * min(big, 1e4) + 1e-6)


@SETTINGS
@given(groups())
def test_float32_matches_the_jax_engine_to_1e_5(case):
    logp, logp_old, scores, eta, _ = case
    jax.config.update("jax_enable_x64", False)
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    args = (jnp.asarray(f32(logp)), jnp.asarray(f32(logp_old)), jnp.asarray(f32(scores)), eta)
    ref = float(L.tpo_loss(*args))
    ref_grad = np.asarray(jax.grad(L.tpo_loss)(*args))
    val, grad = _torch_loss_and_grad(
        f32(logp), f32(logp_old), f32(scores), eta, np.ones_like(logp, bool), torch.float32
    )
    assert abs(val - ref) <= 1e-5 * max(1.0, abs(ref))
    np.testing.assert_allclose(grad, ref_grad, rtol=0, atol=1e-5)


# ---- closed forms -----------------------------------------------------------------------------
def test_standardize_population_std_zero_variance_and_mask():
    s = torch.tensor([[1.0, 0.0, 0.0, 0.0], [2.0, 2.0, 2.0, 2.0]], dtype=torch.float64)
    u = T.standardize(s)
    c = np.array([0.75, -0.25, -0.25, -0.25])
    np.testing.assert_allclose(u[0].numpy(), c / np.sqrt((c**2).mean()), rtol=1e-12)
    assert torch.all(u[1] == 0.0)
    # the 1e-6 rule: σ = 5e-7 keeps u = c, σ = 2e-6 divides
    tiny = T.standardize(torch.tensor([[0.0, 1e-6]], dtype=torch.float64))
    np.testing.assert_allclose(tiny.numpy(), [[-5e-7, 5e-7]], rtol=1e-12)
    np.testing.assert_allclose(
        T.standardize(torch.tensor([[0.0, 4e-6]], dtype=torch.float64)).numpy(), [[-1.0, 1.0]], rtol=1e-9
    )
    # masked: the padded member is ignored and gets u = 0
    um = T.standardize(torch.tensor([[1.0, 0.0, 99.0]], dtype=torch.float64), valid=torch.tensor([[True, True, False]]))
    np.testing.assert_allclose(um.numpy(), [[1.0, -1.0, 0.0]])


def test_target_closed_form_and_zero_variance_group_is_p_old():
    lo = torch.log(torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64))
    s = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    u = np.array([2.0, -1.0, -1.0]) / np.sqrt(2.0)  # (s - 1/3)/sqrt(2/9)
    expect = np.array([0.5, 0.3, 0.2]) * np.exp(u / 0.5)
    np.testing.assert_allclose(T.tpo_target(lo, s, 0.5).numpy()[0], expect / expect.sum(), rtol=1e-12)
    q0 = T.tpo_target(lo, torch.full((1, 3), 0.7, dtype=torch.float64), 2.0)
    np.testing.assert_allclose(q0.numpy(), [[0.5, 0.3, 0.2]], rtol=1e-12)


def test_sequence_logp_sum_and_mean():
    tok = torch.tensor([[-1.0, -2.0, -4.0], [-0.5, -0.5, -9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    assert T.sequence_logp(tok, mask).tolist() == [-7.0, -1.0]
    assert T.sequence_logp(tok, mask, reduce="mean").tolist() == pytest.approx([-7 / 3, -0.5])


def test_group_index_any_order_and_the_sequence_weights():
    uids = ["b", "a", "b", "a", "c", "c"]
    idx = T.group_index(uids)
    assert idx.tolist() == [[0, 2], [1, 3], [4, 5]]
    with pytest.raises(ValueError, match="uids.*not the contiguous block"):
        T.group_index(uids, contiguous=True)
    assert T.group_index(["a", "a", "b", "b"], contiguous=True).tolist() == [[0, 1], [2, 3]]
    # w = K (q - p_old), rows in any order, each group sums to 0; checked against the engine's q
    rng = np.random.default_rng(1)
    lo, s = rng.normal(size=(3, 4)), rng.integers(0, 2, (3, 4)).astype(float)
    perm = rng.permutation(12)
    rows_lo, rows_s = lo.reshape(-1)[perm], s.reshape(-1)[perm]
    rows_uid = np.repeat(np.arange(3), 4)[perm]
    w = T.tpo_sequence_weights(torch.tensor(rows_lo), torch.tensor(rows_s), rows_uid, eta=0.7).numpy()
    with jax.enable_x64(True):
        q = np.asarray(L.tpo_target(jnp.asarray(lo), jnp.asarray(s), 0.7), np.float64)
    p_old = np.exp(lo) / np.exp(lo).sum(-1, keepdims=True)
    np.testing.assert_allclose(w, (4 * (q - p_old)).reshape(-1)[perm], atol=1e-6)


def test_diagnostics_closed_form():
    lo = torch.log(torch.tensor([[0.5, 0.5], [0.9, 0.1]], dtype=torch.float64))
    s = torch.tensor([[1.0, 0.0], [3.0, 3.0]], dtype=torch.float64)
    d = T.tpo_diagnostics(lo, s, eta=1.0)
    q1 = np.exp([1.0, -1.0]) / np.exp([1.0, -1.0]).sum()  # u = ±1, p_old uniform
    assert d["zero_variance_frac"] == 0.5
    assert d["entropy_p_old"] == pytest.approx((math.log(2) - (0.9 * math.log(0.9) + 0.1 * math.log(0.1))) / 2)
    assert d["entropy_q"] == pytest.approx((-(q1 * np.log(q1)).sum() + d["entropy_p_old"] * 2 - math.log(2)) / 2)
    assert d["tv"] == pytest.approx(abs(q1[0] - 0.5) / 2)
    assert d["kl_q_p_old"] == pytest.approx((q1 * np.log(q1 / 0.5)).sum() / 2)
    assert d["argmax_moved_frac"] == 0.0


def test_fully_masked_group_and_single_member_group():
    lp = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    valid = torch.tensor([[False, False, False], [True, False, False]])
    loss = T.tpo_loss(lp, torch.zeros(2, 3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64), valid=valid)
    loss.backward()
    assert loss.item() == 0.0 and torch.all(lp.grad == 0)


# ---- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: T.tpo_loss(torch.zeros(2, 4), torch.zeros(2, 4), torch.zeros(2, 4), eta=0.0), "eta"),
        (lambda: T.tpo_loss(torch.zeros(2, 4), torch.zeros(2, 4), torch.zeros(2, 4), eta=-1.0), "eta"),
        (lambda: T.tpo_target(torch.zeros(2, 4), torch.zeros(2, 4), eta=float("nan")), "eta"),
        (
            lambda: T.tpo_loss(torch.zeros(2, 4), torch.zeros(2, 4), torch.tensor([[0.0, float("nan"), 1, 1]] * 2)),
            "scores",
        ),
        (lambda: T.tpo_loss(torch.zeros(2, 4), torch.zeros(2, 5), torch.zeros(2, 4)), "K mismatch"),
        (lambda: T.tpo_loss(torch.zeros(2, 1), torch.zeros(2, 1), torch.zeros(2, 1)), "K >= 2"),
        (lambda: T.group_index(["a", "a", "b"]), "uids: ragged"),
        (lambda: T.group_index(["a", "a", "b", "b"], group_size=4), "group_size"),
        (lambda: T.sequence_logp(torch.zeros(2, 3), torch.ones(2, 3), reduce="max"), "reduce"),
        (lambda: T.tpo_sequence_weights(torch.zeros(4), torch.zeros(4), ["a", "a", "b"]), "ragged|index"),
        (lambda: T.tpo_sequence_weights(torch.zeros(4), torch.zeros(3), ["a", "a", "b", "b"]), "shapes disagree"),
        (lambda: T.tpo_sequence_weights(torch.zeros(4), torch.zeros(4), ["a", "a", "b", "b"], eta=0), "eta"),
    ],
)
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_torch_ops_imports_no_jax():
    """The module loaded on its own (its file, no tpo_core package) runs without JAX in the process."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('torch_ops', {T.__file__!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "import torch\n"
        "m.tpo_loss(torch.zeros(1, 3), torch.zeros(1, 3), torch.tensor([[1.0, 0.0, 0.0]]))\n"
        "assert 'jax' not in sys.modules, 'jax imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_importing_the_bridge_package_imports_no_jax():
    code = (
        "import sys\nimport tpo_core.bridge.torch_ops, tpo_core.bridge.verl\n"
        "assert 'jax' not in sys.modules, 'jax imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
