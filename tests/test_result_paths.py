"""No committed or newly written result file carries a home-folder path of the machine that wrote it."""

import importlib.util
import json
import pathlib
import re

import pytest

from tpo_core.lab import atomic_io

ROOT = pathlib.Path(__file__).resolve().parents[1]
# a home folder starting a path (after a quote, a space, "=" or the start), as a reader of the file would see it
HOME_IN_TEXT = re.compile(r"(?<![\w.~/-])(?:/root|/home/[^/\s\"']+|/Users/[^/\s\"']+)/")


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "cached fp32 conversion at /root/.cache/tpo_core/llm/b1)",
            "cached fp32 conversion at ~/.cache/tpo_core/llm/b1)",
        ),
        ("/home/alice/x and /Users/bob/y", "~/x and ~/y"),
        ("at /root", "at ~"),
        ("https://a.example/community/cardelines/home/2019x/", "https://a.example/community/cardelines/home/2019x/"),
        ("/rooted/x, /homework/y, ./home/z, ~/home/w", "/rooted/x, /homework/y, ./home/z, ~/home/w"),
        ("/work/me/run and /work/mean/x", "~/run and /work/mean/x"),  # this process's own home, given
    ],
)
def test_without_home_writes_home_prefixes_as_tilde_and_leaves_other_paths(text, expected):
    assert atomic_io.without_home(text, home="/work/me") == expected


def test_without_home_goes_through_containers_and_leaves_other_values():
    got = atomic_io.without_home({"m": "/home/a/b", "l": ["/root/c", 3, None], "t": ("/Users/x/y",)}, home="/nope")
    assert got == {"m": "~/b", "l": ["~/c", 3, None], "t": ("~/y",)}


@pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers", "reasoning_gym")),
    reason="tpo_core.lab.llm needs torch, transformers and reasoning-gym: pip install 'tpo_core[llm]'",
)
def test_the_spread_writer_strips_the_home_folder_from_the_model_line(tmp_path, monkeypatch):
    from tpo_core.lab.llm import spread as S

    real = S._load_model

    def loaded_from_home(model, model_path, quiet):
        m, tok, _, chat = real("tiny", model_path, quiet)
        return m, tok, f"tiny, cached at {pathlib.Path.home()}/.cache/tpo_core/llm/abc and /home/ci/x", chat

    monkeypatch.setattr(S, "_load_model", loaded_from_home)
    S.run_spread(
        tmp_path, task="leg_counting", settings=["a1"], groups=2, k=4, max_new_tokens=4, model="tiny", quiet=True
    )
    record = json.loads((tmp_path / "spread.json").read_text())["settings"]["leg_counting/a1"]
    assert record["model"] == "tiny, cached at ~/.cache/tpo_core/llm/abc and ~/x"


def test_no_committed_result_file_carries_a_home_folder_path():
    found = []
    for path in sorted((ROOT / "results").rglob("*")):
        if path.is_file() and path.suffix in (".json", ".md", ".html", ".txt", ".csv", ".log"):
            text = path.read_text(encoding="utf-8", errors="replace")
            found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in HOME_IN_TEXT.finditer(text)]
    assert not found, (
        "home-folder paths in committed results (write them through atomic_io.without_home):\n" + "\n".join(found[:20])
    )
