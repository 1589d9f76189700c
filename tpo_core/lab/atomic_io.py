"""Atomic result files: write to a temporary file in the same folder, then rename over the target."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import tempfile

import numpy as np


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once at import: os.umask is process-wide, so never toggle it while threads run


_TEMP_SUFFIX = ".tmp"


def _temp_prefix(path: pathlib.Path) -> str:
    """A writer's temporary file is ``.<name>.<random><_TEMP_SUFFIX>`` beside its target (hidden: no reader globs it)."""
    return "." + path.name + "."


def _atomic_write(path, write) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_temp_prefix(path), suffix=_TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), 0o666 & ~_UMASK)  # mkstemp's 0600 -> what open() would have given
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def remove_stale_temps(path) -> int:
    """Delete the temporary files a writer of ``path`` left when it was killed mid-write (SIGKILL skips the
    cleanup above; the target itself is never half-written). Only the one process that writes ``path`` may
    call this: a live writer's temporary file has the same name pattern. Returns how many it removed."""
    path = pathlib.Path(path)
    removed = 0
    for tmp in path.parent.glob(_temp_prefix(path) + "*" + _TEMP_SUFFIX) if path.parent.is_dir() else ():
        tmp.unlink(missing_ok=True)
        removed += 1
    return removed


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


# A home folder at the start of a path: /root, /home/<user>, /Users/<user> (not such a word inside a longer path
# or a URL, e.g. a model's generated ``.../cardelines/home/2019...``).
_HOME_PATH = re.compile(r"(?<![\w.~/-])(?:/root|/home/[^/\s\"']+|/Users/[^/\s\"']+)(?=/|$|[\s\"'),;])")


def without_home(x, home: str | None = None):
    """``x`` (a string, or lists/tuples/dicts of them) with each home-folder path prefix written as ``~``: this
    process's own home (``home``, default ``Path.home()``) wherever it starts a path, and any /root, /home/<user>
    or /Users/<user>. Result files are committed and published; the machine that wrote them is nobody's business."""
    if isinstance(x, str):
        home = str(pathlib.Path.home()) if home is None else home
        if home not in ("", os.sep):
            x = re.sub(r"(?<![\w.~/-])" + re.escape(home.rstrip(os.sep)) + r"(?=/|$|[\s\"'),;])", "~", x)
        return _HOME_PATH.sub("~", x)
    if isinstance(x, dict):
        return {k: without_home(v, home) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(without_home(v, home) for v in x)
    return x


def sha256_file(path) -> str:
    """SHA-256 hex digest of a file, read in 1 MiB blocks (the one checksum helper of the package)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
