"""Tables by name: the entry a catalog keeps of a Delta table (`entry.py`, the same for every
catalog), and each catalog's client (`glue.py`, `hive.py`), behind `register` (`register.py`).

A registration reads the table with delta-rs (no JVM) and compares the entry the catalog
holds with the one the table's latest version makes: it writes only when the entry is
missing or stale, so a run retries what an earlier run could not do.
"""

from runner.catalog.register import Registration, register, register_or_warn

__all__ = ["Registration", "register", "register_or_warn"]
