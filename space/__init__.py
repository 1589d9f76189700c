"""The Gradio demo as a Hugging Face Space: the Space's own files (README.md with the Spaces front matter, app.py)
and :mod:`space.assemble`, which builds the folder uploaded to the Space (``make space``)."""
