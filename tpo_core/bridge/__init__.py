"""PyTorch bridge: TPO (arXiv 2604.06159) for LLM trainers, tested against the JAX engine.

* :mod:`tpo_core.bridge.torch_ops` — the group math in pure PyTorch (imports only ``torch``);
* :mod:`tpo_core.bridge.trl` — ``TargetPOConfig`` / ``TargetPOTrainer`` on TRL's ``GRPOTrainer``;
* :mod:`tpo_core.bridge.verl` — verl advantage estimators and policy losses (a ``verl.plugins`` entry point).

Nothing here imports a trainer until you import its submodule. Install with
``pip install "tpo_core[torch]"``, ``"tpo_core[trl]"`` or ``"tpo_core[verl]"``.
"""
