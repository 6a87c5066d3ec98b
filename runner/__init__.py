"""runner: declarative, config-driven ingestion into bucket-indexed Delta Lake tables."""

__version__ = "0.1.0"
