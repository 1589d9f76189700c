"""Atomic result files: write to a temporary file in the same folder, then rename over the target."""
from __future__ import annotations

import json
import os
import pathlib
import tempfile

import numpy as np


def _atomic_write(path, write) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _jsonable(x):
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x)}")


def write_json(path, obj) -> pathlib.Path:
    data = json.dumps(obj, indent=1, default=_jsonable).encode()
    return _atomic_write(path, lambda f: f.write(data))


def write_npz(path, **arrays) -> pathlib.Path:
    return _atomic_write(path, lambda f: np.savez_compressed(f, **arrays))


def write_text(path, text: str) -> pathlib.Path:
    return _atomic_write(path, lambda f: f.write(text.encode()))
