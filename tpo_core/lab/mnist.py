"""MNIST for the contextual bandit: always real MNIST, the full set when it can be found or fetched.

Search order: ``data_dir`` → ``$TPO_DATA_DIR`` → the cache dir (``$TPO_CACHE_DIR`` or
``~/.cache/tpo_core/mnist``) → download of the full 60k/10k set into the cache with MD5 verification (when
online, e.g. on Colab) → the 10,000-image MNIST test set shipped inside the package
(``tpo_core/lab/data/mnist``, CC BY-SA 3.0, SHA-256 verified). When only the 10k test set is there, it is split
deterministically into 8,000 train / 2,000 test images (the split of the committed runs under
``results/mnist``). One line on stderr says which data is used.
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

from . import atomic_io

FILES = {  # name -> MD5 of the *decompressed* IDX file
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}
# The test set shipped in the package (tpo_core/lab/data/mnist/README.md): file -> SHA-256 of the .gz file.
SHIPPED_DIR = pathlib.Path(__file__).resolve().parent / "data" / "mnist"
SHIPPED_SHA256 = {
    "t10k-images-idx3-ubyte.gz": "167310007f03058885c7e95e6c0b19c20de5c7fd3031f4cbdadc9014a523d80b",
    "t10k-labels-idx1-ubyte.gz": "fc607395669ec21321ea83e4b82c0544b7e8e63ff5b34337c06bc0a17cc0da3c",
}
SPLIT_TRAIN = 8000  # test-set-only data: the first 8,000 of a fixed permutation train, the other 2,000 test
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
    source: str  # one line saying where the images came from

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
    dims = struct.unpack(">" + "I" * ndim, raw[4 : 4 + 4 * ndim])
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
    return _split_test_set(x_test, y_test, f"MNIST test set only (IDX files in {directory.name}/)")


def _split_test_set(x, y, where: str) -> Dataset:
    """The 10k test set split into 8,000 train / 2,000 test by a fixed permutation (seed 0)."""
    perm = np.random.default_rng(0).permutation(len(y))
    tr, te = perm[:SPLIT_TRAIN], perm[SPLIT_TRAIN:]
    return Dataset(
        x[tr], y[tr], x[te], y[te], f"{where}: split {len(tr):,} train / {len(te):,} test (fixed permutation, seed 0)"
    )


def shipped() -> Dataset:
    """The MNIST test set shipped in the package, SHA-256 verified, split 8,000 / 2,000."""
    for name, expected in SHIPPED_SHA256.items():
        path = SHIPPED_DIR / name
        if not path.exists() or atomic_io.sha256_file(path) != expected:
            raise RuntimeError(
                f"the MNIST file shipped with tpo_core, {path}, is missing or fails its SHA-256 "
                f"check (expected {expected}); reinstall tpo_core or set TPO_DATA_DIR"
            )
    x = read_idx(SHIPPED_DIR / "t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255.0
    y = read_idx(SHIPPED_DIR / "t10k-labels-idx1-ubyte.gz").astype(np.int32)
    return _split_test_set(x, y, "MNIST test set only (shipped with tpo_core, SHA-256 verified)")


def load(data_dir=None, *, allow_download: bool = True, verbose: bool = True) -> Dataset:
    """Load MNIST as float32 images in [0, 1] (flattened) and int32 labels (search order: module docstring)."""
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
        ds = shipped()
    if verbose:
        print(f"[tpo_core.lab.mnist] {ds.source}", file=sys.stderr)
    return ds
