"""The MNIST test set shipped inside the package: the offline fallback of tpo_core.lab.mnist.load."""

from __future__ import annotations

import gzip
import hashlib
import pathlib
import shutil
import tomllib
import urllib.request

import numpy as np
import pytest

from tpo_core.lab import mnist

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tpo_core" / "lab" / "data" / "mnist"
# The published checksums (tpo_core/lab/data/mnist/README.md): SHA-256 of the .gz files, and the canonical MD5s of
# the decompressed IDX files that every MNIST loader checks.
SHA256 = {
    "t10k-images-idx3-ubyte.gz": "167310007f03058885c7e95e6c0b19c20de5c7fd3031f4cbdadc9014a523d80b",
    "t10k-labels-idx1-ubyte.gz": "fc607395669ec21321ea83e4b82c0544b7e8e63ff5b34337c06bc0a17cc0da3c",
}
MD5 = {
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}
LABEL_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]  # MNIST's test set, digits 0..9


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """No TPO_DATA_DIR, an empty cache, and any attempt to reach the network fails."""
    monkeypatch.delenv("TPO_DATA_DIR", raising=False)
    monkeypatch.setenv("TPO_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def no_network(url, *args, **kwargs):
        calls.append(getattr(url, "full_url", url))
        raise OSError("offline (test)")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    return calls


def test_the_shipped_files_are_the_canonical_mnist_test_set():
    for name, digest in SHA256.items():
        raw = (DATA / name).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == digest
        assert hashlib.md5(gzip.decompress(raw)).hexdigest() == MD5[name.removesuffix(".gz")]
    assert mnist.SHIPPED_SHA256 == SHA256
    assert {k: v for k, v in mnist.FILES.items() if k.startswith("t10k")} == MD5  # the download's MD5s agree


def _raw_test_set():
    """Images [10000, 28, 28] and labels, parsed here from the IDX bytes (header: magic, counts, rows, cols)."""
    img = gzip.decompress((DATA / "t10k-images-idx3-ubyte.gz").read_bytes())
    lab = gzip.decompress((DATA / "t10k-labels-idx1-ubyte.gz").read_bytes())
    assert int.from_bytes(img[:4], "big") == 2051 and int.from_bytes(lab[:4], "big") == 2049
    n, rows, cols = (int.from_bytes(img[i : i + 4], "big") for i in (4, 8, 12))
    return np.frombuffer(img[16:], np.uint8).reshape(n, rows, cols), np.frombuffer(lab[8:], np.uint8)


def test_offline_without_data_dir_the_loader_uses_the_shipped_set_split_8000_2000(offline, capsys):
    ds = mnist.load()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "shipped with tpo_core, SHA-256 verified" in err[0]
    assert "8,000 train / 2,000 test" in ds.source
    assert offline, "the loader should have tried the full-MNIST download first"
    images, labels = _raw_test_set()
    assert images.shape == (10_000, 28, 28)
    assert ds.x_train.shape == (8000, 28 * 28) and ds.x_test.shape == (2000, 28 * 28)
    assert ds.x_train.dtype == np.float32 and 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0
    perm = np.random.default_rng(0).permutation(10_000)  # the documented split, recomputed here
    np.testing.assert_array_equal(ds.y_train, labels[perm[:8000]])
    np.testing.assert_array_equal(ds.y_test, labels[perm[8000:]])
    np.testing.assert_array_equal(ds.x_test[7].reshape(28, 28), images[perm[8007]] / np.float32(255))
    np.testing.assert_array_equal(np.bincount(np.concatenate([ds.y_train, ds.y_test])), LABEL_COUNTS)
    again = mnist.load(verbose=False)  # deterministic
    np.testing.assert_array_equal(again.x_train, ds.x_train)


def test_a_corrupted_shipped_file_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / "mnist"
    shutil.copytree(DATA, bad)
    raw = bytearray((bad / "t10k-labels-idx1-ubyte.gz").read_bytes())
    raw[-5] ^= 0xFF
    (bad / "t10k-labels-idx1-ubyte.gz").write_bytes(bytes(raw))
    monkeypatch.setattr(mnist, "SHIPPED_DIR", bad)
    with pytest.raises(RuntimeError, match="SHA-256"):
        mnist.shipped()


def test_the_package_data_carries_the_files_and_their_licence():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = cfg["tool"]["setuptools"]["package-data"]["tpo_core.lab"]
    pkg = ROOT / "tpo_core" / "lab"
    shipped = {p.relative_to(pkg).as_posix() for pat in patterns for p in pkg.glob(pat)}
    assert {f"data/mnist/{n}" for n in SHA256} | {"data/mnist/README.md"} <= shipped
    readme = (DATA / "README.md").read_text()
    assert "CC BY-SA 3.0" in readme and all(d in readme for d in SHA256.values())
