"""Osband's token-reversal family: targets, per-token rewards, sequence scores and the error metric.

Prompt: H tokens uniform over {0..V-1}. Targets: copy, flip (V-1-x), reverse copy, reverse flip.
Rewards per answer token: ``bag`` r_t = 1{a_t = target_t}; ``sequential`` r_t = Π_{j<=t} 1{a_j = target_j}
(credit up to the first mistake); ``terminal`` r_t = 1{whole answer correct}.
Sequence score = mean_t r_t. Error = 1 - mean score, which is the exact-match error for
``terminal``, the token error for ``bag`` and 1 - mean cumulative product for ``sequential``.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import checks
from .constants import DENSE_REWARDS, REWARDS, TARGETS


def check_target(target: str) -> None:
    """``target`` is one of ``TARGETS``; ``ValueError`` naming it otherwise."""
    checks.one_of("target", target, TARGETS)


def check_reward(reward: str) -> None:
    """``reward`` is one of ``REWARDS``; ``ValueError`` naming it otherwise."""
    checks.one_of("reward", reward, REWARDS)


def target_tokens(prompts, target: str, vocab: int):
    """prompts [..., H] -> the correct answer [..., H]."""
    check_target(target)
    x = prompts[..., ::-1] if target.startswith("reverse") else prompts
    return vocab - 1 - x if target.endswith("flip") else x


def token_rewards(correct, reward: str):
    """correct [..., H] (bool) -> per-token rewards [..., H] (float32)."""
    check_reward(reward)
    c = correct.astype(jnp.float32)
    if reward == "bag":
        return c
    if reward == "sequential":
        return jnp.cumprod(c, axis=-1)
    return jnp.broadcast_to(c.prod(-1, keepdims=True), c.shape)


def candidate_rewards(cand_correct, behaviour_correct, reward: str):
    """Dense rewards of K next-token candidates at every state of a behaviour trajectory.

    cand_correct [B, H, K]: candidate k at state t equals target_t; behaviour_correct [B, H].
    bag: 1{c = target_t}; sequential: (behaviour prefix before t all correct) · 1{c = target_t}.
    """
    if reward not in DENSE_REWARDS:
        raise ValueError(f"token-level methods need a dense reward {DENSE_REWARDS}, got reward={reward!r}")
    c = cand_correct.astype(jnp.float32)
    if reward == "bag":
        return c
    prefix = jnp.cumprod(behaviour_correct.astype(jnp.float32), axis=-1)
    prefix_before = jnp.concatenate([jnp.ones_like(prefix[..., :1]), prefix[..., :-1]], -1)
    return prefix_before[..., None] * c


def sequence_scores(rewards):
    """Per-token rewards [..., H] -> sequence score [...] (mean over tokens)."""
    return rewards.mean(-1)


def error_rate(scores):
    """1 - mean score: the paper's error of an episode's own rollouts."""
    return 1.0 - scores.mean()
