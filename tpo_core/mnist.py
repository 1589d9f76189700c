"""MNIST for the contextual bandit: real IDX files when available, a clearly announced fallback otherwise.

Search order: ``$TPO_DATA_DIR`` → the cache dir (``$TPO_CACHE_DIR`` or ``~/.cache/tpo_core/mnist``)
→ download into the cache with MD5 verification (when online, e.g. on Colab) → scikit-learn's
bundled 8×8 digits. When only the 10k test set is present (as on machines without internet), it is
split deterministically into 8,000 train / 2,000 test images, and a one-line notice says so.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import os
import pathlib
import struct
import sys
import urllib.request

import numpy as np

FILES = {  # name -> MD5 of the *decompressed* IDX file
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cddbe91e2a9f1ae1ac4",
}
MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
)


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
    x_train: np.ndarray  # [N, D] float32 in [0, 1]
    y_train: np.ndarray  # [N] int32
    x_test: np.ndarray
    y_test: np.ndarray
    source: str          # one line saying where the images came from

    @property
    def num_classes(self) -> int:
        return 10


def cache_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("TPO_CACHE_DIR", pathlib.Path.home() / ".cache" / "tpo_core")) / "mnist"


def read_idx(path) -> np.ndarray:
    """Read an IDX file (optionally .gz) into a numpy array."""
    path = pathlib.Path(path)
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, raw[4: 4 + 4 * ndim])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def _find(directory: pathlib.Path, name: str):
    for candidate in (directory / name, directory / (name + ".gz")):
        if candidate.exists():
            return candidate
    return None


def _md5_ok(path: pathlib.Path, name: str) -> bool:
    raw = path.read_bytes()
    raw = gzip.decompress(raw) if path.suffix == ".gz" else raw
    return hashlib.md5(raw).hexdigest() == FILES[name]


def download(directory: pathlib.Path, timeout: float = 10.0) -> bool:
    """Fetch the four files into ``directory`` and verify their MD5; False when offline."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        if _find(directory, name) is not None and _md5_ok(_find(directory, name), name):
            continue
        for mirror in MIRRORS:
            try:
                with urllib.request.urlopen(mirror + name + ".gz", timeout=timeout) as r:
                    data = r.read()
            except OSError:
                continue
            tmp = directory / (name + ".gz.part")
            tmp.write_bytes(data)
            if hashlib.md5(gzip.decompress(data)).hexdigest() != FILES[name]:
                tmp.unlink()
                continue
            os.replace(tmp, directory / (name + ".gz"))
            break
        else:
            return False
    return True


def _from_dir(directory: pathlib.Path):
    files = {n: _find(directory, n) for n in FILES}
    if files["t10k-images-idx3-ubyte"] is None or files["t10k-labels-idx1-ubyte"] is None:
        return None
    x_test = read_idx(files["t10k-images-idx3-ubyte"]).reshape(-1, 784).astype(np.float32) / 255.0
    y_test = read_idx(files["t10k-labels-idx1-ubyte"]).astype(np.int32)
    if files["train-images-idx3-ubyte"] and files["train-labels-idx1-ubyte"]:
        x_train = read_idx(files["train-images-idx3-ubyte"]).reshape(-1, 784).astype(np.float32) / 255.0
        y_train = read_idx(files["train-labels-idx1-ubyte"]).astype(np.int32)
        return Dataset(x_train, y_train, x_test, y_test, f"MNIST 60k/10k (IDX files in {directory.name}/)")
    perm = np.random.default_rng(0).permutation(len(y_test))
    tr, te = perm[:8000], perm[8000:]
    return Dataset(x_test[tr], y_test[tr], x_test[te], y_test[te],
                   f"MNIST test set only (IDX files in {directory.name}/): split 8,000 train / 2,000 test (fixed permutation, seed 0)")


def _sklearn_digits() -> Dataset:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int32)
    perm = np.random.default_rng(0).permutation(len(y))
    n = int(0.8 * len(y))
    return Dataset(x[perm[:n]], y[perm[:n]], x[perm[n:]], y[perm[n:]],
                   "MNIST unavailable (no IDX files here, and offline): using scikit-learn's 8x8 digits (1,437 train / 360 test)")


def load(data_dir=None, *, allow_download: bool = True, verbose: bool = True) -> Dataset:
    """Load MNIST as float32 images in [0, 1] (flattened) and int32 labels."""
    dirs = [pathlib.Path(data_dir)] if data_dir else []
    if os.environ.get("TPO_DATA_DIR"):
        dirs.append(pathlib.Path(os.environ["TPO_DATA_DIR"]))
    dirs.append(cache_dir())
    ds = None
    for d in dirs:
        if d.is_dir() and (ds := _from_dir(d)) is not None:
            break
    if ds is None and allow_download and download(cache_dir()):
        ds = _from_dir(cache_dir())
    if ds is None:
        ds = _sklearn_digits()
    if verbose:
        print(f"[tpo_core.mnist] {ds.source}", file=sys.stderr)
    return ds
