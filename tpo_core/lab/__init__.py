"""The lab: what reproduces, stores, judges and draws the experiments, on top of the library (:mod:`tpo_core`).

The reproduction presets, runner and statistics (:mod:`~tpo_core.lab.reproduce`), the LLM experiment
(:mod:`~tpo_core.lab.llm`), the reports (:mod:`~tpo_core.lab.report`), the figures (:mod:`~tpo_core.lab.figures`),
MNIST (:mod:`~tpo_core.lab.mnist`), the command line (:mod:`~tpo_core.lab.cli`, run as ``python -m tpo_core``) and
the book's helpers (:mod:`~tpo_core.lab.notebook`, :mod:`~tpo_core.lab.exercises`, :mod:`~tpo_core.lab.explorer`,
:mod:`~tpo_core.lab.widget`). The lab imports the library; the library never imports the lab (the contract in
``pyproject.toml``). Import the submodules directly: this ``__init__`` imports nothing.
"""
