"""The rules every part of the project shares, as plain values: no imports, so the numpy explorer of the demo
and the torch bridge (which must not import JAX) read the same objects as the JAX engine.

* ``STD_FLOOR``: the group standardisation's σ threshold (arXiv 2604.06159 §2 and the reference code):
  u = c/σ only if σ > STD_FLOOR, else u = c, so an all-equal group gives u = 0 exactly.
* ``GRPO_EPS``: GRPO's denominator, (s - mean) / (std + GRPO_EPS).
* ``TARGETS`` / ``REWARDS`` / ``DENSE_REWARDS``: Osband's token-reversal family (:mod:`tpo_core.tasks`);
  the dense rewards are those the token-level methods (K candidates per state) need.
* ``TOKEN_REVERSAL`` / ``MNIST_BANDIT`` (``TASK_FAMILIES``): the names of the two task families as the demo
  and the notebook widget show them.
* ``MAX_ETA``: the largest η the demo and the widget accept: there exp(u/η) is within a few % of 1 for z-scored
  u, so q ≈ p_old.
"""

STD_FLOOR = 1e-6
GRPO_EPS = 1e-8

TARGETS = ("copy", "flip", "reverse_copy", "reverse_flip")
REWARDS = ("bag", "sequential", "terminal")
DENSE_REWARDS = ("bag", "sequential")

TOKEN_REVERSAL = "token reversal"
MNIST_BANDIT = "MNIST bandit"
TASK_FAMILIES = (TOKEN_REVERSAL, MNIST_BANDIT)

MAX_ETA = 100.0
