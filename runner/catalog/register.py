"""A table's registration in the catalog its spec names: the entry made from the table's
latest version, handed to the catalog's client, which writes it when it is missing or stale."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from runner.catalog.entry import table_entry
from runner.catalog.glue import sync_glue
from runner.catalog.hive import sync_hive
from runner.delta.snapshot import open_table
from runner.errors import CatalogError, UserError
from runner.spec.model import CatalogSpec, Target
from runner.spec.secrets import resolve, scrub


@dataclass(frozen=True)
class Registration:
    """What a registration did: `created`, `updated`, `unchanged` or `failed` (and why)."""

    catalog: CatalogSpec
    done: str
    version: int | None = None  # the table version registered
    columns: int = 0
    location: str = ""
    database_created: bool = False
    error: str | None = None  # one line, when it failed

    def to_dict(self) -> dict[str, Any]:
        """The run summary's `catalog` field and `runner sync --json`."""
        found = {
            "type": self.catalog.type,
            "name": self.catalog.name,
            "done": self.done,
            "version": self.version,
            "columns": self.columns,
            "location": self.location,
            "database_created": self.database_created,
        }
        return found | ({"error": self.error} if self.error else {})

    def render(self) -> str:
        """One line, as `runner sync` prints it."""
        database = f" (database {self.catalog.database} created)" if self.database_created else ""
        return (
            f"{self.catalog.type} {self.catalog.name}: {self.done}{database}, version "
            f"{self.version}, {self.columns} column(s) at {self.location}"
        )


def resolved(catalog: CatalogSpec) -> CatalogSpec:
    """The catalog's settings with their `${env:NAME}` references resolved."""
    values = {f.name: getattr(catalog, f.name) for f in fields(catalog)}
    return CatalogSpec(**resolve(values, where="target.catalog"))


def register(target: Target) -> Registration:
    """Create or update the target's entry in its catalog from the table's latest version.
    Raises CatalogError when the catalog does not take it, UserError without a table."""
    catalog = target.catalog
    assert catalog is not None, "the caller checks target.catalog"
    try:
        return _register(target, catalog)
    except CatalogError as failure:
        raise CatalogError(
            f"{catalog.type} {catalog.name}: not registered: {failure}; the table is as it "
            "was; run `runner sync` again once the catalog answers"
        ) from failure


def register_or_warn(target: Target) -> Registration:
    """`register`, a failure kept as the registration's error: after a commit, a catalog
    that does not answer never fails or undoes the run (the next run registers)."""
    catalog = target.catalog
    assert catalog is not None, "the caller checks target.catalog"
    try:
        return _register(target, catalog)
    except Exception as failure:  # a network, a permission, a refusal: the commit stands
        reason = (
            str(failure)
            if isinstance(failure, CatalogError)
            else f"{type(failure).__name__}: {failure}"
        )
        return Registration(catalog, "failed", error=scrub(reason))


def _register(target: Target, catalog: CatalogSpec) -> Registration:
    catalog = resolved(catalog)
    snapshot = open_table(target.path)
    if snapshot is None:
        raise UserError(
            f"no Delta table at {target.path} to register as {catalog.name}; run the pipeline first"
        )
    entry = table_entry(snapshot.table, target.path)
    sync = sync_hive if catalog.type == "hive" else sync_glue
    done, database_created = sync(catalog, entry)
    return Registration(
        catalog,
        done,
        version=snapshot.version,
        columns=len(entry.columns),
        location=entry.location,
        database_created=database_created,
    )
