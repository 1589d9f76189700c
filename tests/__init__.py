"""The test suite (a package, so `tests.*` resolves here and not to a `tests` package some dependency installs)."""
