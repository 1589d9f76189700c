"""The Gradio demo of TPO: ``python -m demos.app`` (see :func:`demos.app.build_app`)."""
