"""tpo_core — Target Policy Optimization (Kaddour 2026) in JAX: losses, tasks, models, jitted training.

Quick tour::

    import tpo_core
    q = tpo_core.tpo_target(logp_old, scores, eta=1.0)      # q ∝ p_old · exp(u/η), group on the last axis
    loss = tpo_core.tpo_loss(logp, logp_old, scores)         # -Σ q log softmax(logp), mean over leading axes
    cfg = tpo_core.TokenConfig(method="tpo", H=7, episodes=300)
    metrics = tpo_core.train_tokens(cfg, seeds=(0, 1))       # numpy arrays [seeds, episodes, ...]
"""
from .losses import (clipped_surrogate, cross_entropy_loss, dapo_loss, dg_loss, dg_weights, group_pg_loss,
                     grpo_advantages, grpo_loss, grpo_token_ratio_loss, k3_kl, batch_baseline_advantages,
                     pg_loss, ppo_loss, rebel_loss, rloo_advantages, rloo_loss, standardize, tpo_loss,
                     tpo_target, tpo_token_loss, vmpo_loss, zero_variance)
from .methods import BANDIT_METHODS, REGISTRY, TOKEN_METHODS, Method, get as get_method
from .config import BanditConfig, TokenConfig
from .runtime import enable_compile_cache
from .train import make_bandit_program, make_token_program, train_bandit, train_tokens

__version__ = "0.1.0"
