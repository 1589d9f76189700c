"""Hugging Face Spaces entry point: Spaces runs ``python app.py`` in the Space's folder and expects the app on
0.0.0.0:7860. This folder is built by ``space/assemble.py`` (a copy of the repository's ``demos/`` package beside
this file, ``tpo_core`` installed from requirements.txt); the app itself is ``demos.app``'s command line, which
builds ``demos.app.build_app()`` and launches it.

Host and port: ``TPO_DEMO_HOST`` / ``TPO_DEMO_PORT`` (as for ``python -m demos.app``), else Gradio's own
``GRADIO_SERVER_NAME`` / ``GRADIO_SERVER_PORT``, else 0.0.0.0:7860. ``TPO_DEMO_WARM=0`` skips compiling the
default training configuration at startup."""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # before gradio is imported


def main() -> None:
    os.environ.setdefault("TPO_DEMO_HOST", os.environ.get("GRADIO_SERVER_NAME") or "0.0.0.0")
    os.environ.setdefault("TPO_DEMO_PORT", os.environ.get("GRADIO_SERVER_PORT") or "7860")
    from demos.app import main as demo_main

    demo_main([])  # no arguments: the host, port and warm-up come from the environment above


if __name__ == "__main__":
    main()
