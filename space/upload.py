"""Upload an assembled Space folder to its Hugging Face Space (the ``space`` workflow's last step).

    HF_TOKEN=... python -m space.upload DIR [--space-id OWNER/NAME] [--message TEXT]

The token comes from the environment only (``HF_TOKEN``; in the workflow, the repository secret of that name).
The Space is created if missing (gradio SDK), then made equal to DIR in one commit: files the folder no longer
has are deleted (``delete_patterns="*"``; huggingface_hub keeps the Space's ``.gitattributes``). Without a token
it says so and exits 2.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

from space import assemble


def upload(folder, space_id: str, token: str, message: str) -> str:
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(space_id, repo_type="space", space_sdk="gradio", exist_ok=True)
    info = api.upload_folder(
        repo_id=space_id, repo_type="space", folder_path=str(folder), commit_message=message, delete_patterns="*"
    )
    return info.commit_url


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m space.upload", description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="a folder written by python -m space.assemble")
    ap.add_argument("--space-id", default=None, help="OWNER/NAME (default: from _config.yml's repository url)")
    ap.add_argument("--message", default="Sync the demo from the repository", help="the Space's commit message")
    args = ap.parse_args(argv)
    folder = pathlib.Path(args.folder)
    if not (folder / "app.py").is_file() or not (folder / "README.md").is_file():
        print(
            f"space.upload: error: {str(folder)!r} is not an assembled Space (no app.py and README.md)", file=sys.stderr
        )
        return 2
    token = os.environ.get("HF_TOKEN", "").strip()
    if not token:
        print("space.upload: error: HF_TOKEN is not set", file=sys.stderr)
        return 2
    space_id = args.space_id or assemble.space_id()
    print(
        f"space.upload: {assemble.space_url() if space_id == assemble.space_id() else space_id}: "
        f"{upload(folder, space_id, token, args.message)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
