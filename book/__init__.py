"""The Jupyter Book of tpo-interactive: build (book.build) and Colab-notebook pairing (book.sync)."""
