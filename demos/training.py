"""Live training for the demo: validated configs, chunk-by-chunk streaming of several methods, figures.

The engine (``Request``, ``stream``, the program cache, ``run_chunk``, ``schedule``, ``warm``) is
:mod:`tpo_core.stream`, the request validation and the figure builders :mod:`tpo_core.lab.live`, both shared with
the notebook widget (:mod:`tpo_core.lab.widget`); this module re-exports them under the names the demo has always
used (``validate`` raising the demo's ``InputError``), and keeps what only the demo needs: its default run and the
explanation shown beside its plots.
"""

from __future__ import annotations

from tpo_core import methods as M  # noqa: F401
from tpo_core import runtime  # noqa: F401
from tpo_core.config import BanditConfig, TokenConfig  # noqa: F401
from tpo_core.constants import MNIST_BANDIT, TOKEN_REVERSAL
from tpo_core.lab.live import (  # noqa: F401
    H_MAX,
    H_MIN,
    MAX_B,
    MAX_BANDIT_STEPS,
    MAX_EPISODES,
    MAX_METHODS,
    MAX_SEEDS,
    MAX_TRAIN_K,
    REWARDS,
    TASKS,
    control_defaults,
    error_figure,
    figures,
    grad_figure,
    mnist_dataset,
    pq_figure,
    program_for,
    status_markdown,
    stream,
    warm,
    zero_var_figure,
)
from tpo_core.stream import (  # noqa: F401
    BANDIT_CHUNK,
    BANDIT_EVAL_EVERY,
    CHUNK,
    FAMILIES,
    KEEP,
    Request,
    family,
    is_warm,
    run_chunk,
    schedule,
)

from .inputs import InputError, validate  # noqa: F401  (the engine's validate, its ValueError as InputError)

# The default run is the MNIST bandit, where both methods learn within a minute on a CPU and the gradient plot
# shows the paper's observation (TPO's ‖∇L‖ falls as its policy reaches the targets, GRPO's stays high); the
# token-task values apply when the reader switches task. tests/test_demo_callbacks.py checks what EXPLAIN says
# about the default run against a real default run.
DEFAULTS = dict(task=MNIST_BANDIT, methods=["tpo", "grpo"], **control_defaults())
# The Train button's inputs in the order the callback (app.train_stream) and validate take them.
TRAIN_INPUTS = ("task", "methods", "reward", "H", "B", "K", "eta", "episodes", "n_seeds", "seed", "bandit_steps")


def train_args(**overrides) -> tuple:
    """The Train button's inputs at the defaults, with ``overrides`` (e.g. ``eta=0.5``), in TRAIN_INPUTS order."""
    unknown = overrides.keys() - set(TRAIN_INPUTS)
    if unknown:
        raise ValueError(f"train_args got unknown inputs {sorted(unknown)}; choose from {', '.join(TRAIN_INPUTS)}")
    return tuple({**DEFAULTS, **overrides}[name] for name in TRAIN_INPUTS)


EXPLAIN = {
    MNIST_BANDIT: (
        "**What you are looking at** (MNIST contextual bandit: one guess per image, reward 1 if right). "
        "**Left:** greedy test error; both methods learn. **Right** (log axis, mean of each block of 100 steps): "
        "the gradient norm ‖∇L‖ (solid) and the length of the Adam step ‖Δθ‖ (dashed). At the defaults, "
        "TPO's ‖∇L‖ peaks early and then falls: its target is a bounded tilt of the current policy, "
        "q ∝ π·e^u, so once the policy is confident on an image q is close to it and the gradient p − q is "
        "small. GRPO's (REINFORCE with batch-standardised rewards, rescaled to unit size whatever the policy) "
        "climbs and stays near its peak, ending several times larger than TPO's. The paper reports the same "
        "contrast on the token task (its ablation runs). "
        "The two methods' steps ‖Δθ‖ stay of similar size all the same: Adam divides the gradient by its "
        "running size, so a small gradient is "
        "not a small step. **Bottom:** training error of the sampled guesses."
    ),
    TOKEN_REVERSAL: (
        "**What you are looking at** (reverse copy, V = 2: reproduce the prompt backwards; one group of K "
        "answers per prompt). **Top left:** error of each episode's rollouts. **Top right** (log axis): the "
        "first epoch's ‖∇L‖ (solid) and Muon/AdamW step ‖Δθ‖ (dashed). With the terminal reward most groups "
        "are all-fail at first: TPO's target is then q = p_old and GRPO's advantages are 0, so neither gets a "
        "first-epoch gradient from them; a run whose groups are all zero-variance (bottom left) has ‖∇L‖ = 0 "
        "while its step stays finite (Muon normalises the momentum). **Bottom right:** one tracked group, "
        "the policy over its K answers before each epoch (p_old first) against TPO's target q: TPO's loss "
        "pulls p toward q over the epochs (the KL in each title says how close it got); GRPO does not aim at "
        "q (it is drawn for comparison). Use the slider to scrub "
        "through episodes. The paper's gradient-norm observation was made at H = 8, B = 256, K = 32 over "
        "2,000 episodes, larger than a live run here."
    ),
}
