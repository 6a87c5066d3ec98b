"""Sources: each becomes a DataFrame and a temporary view under its name."""

from runner.sources.files import read_input

__all__ = ["read_input"]
