"""Every error the runner raises on purpose. The CLI maps UserError to exit 2, the rest to 1."""

from __future__ import annotations

from dataclasses import dataclass


class RunnerError(Exception):
    """Base of all runner errors."""

    exit_code = 1


class UserError(RunnerError):
    """Something the user can fix in the spec, the command line or the input (exit 2)."""

    exit_code = 2


@dataclass(frozen=True)
class SpecProblem:
    """One problem in a spec file, located by file, line, column and dotted field path."""

    file: str
    line: int
    column: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        return (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )


class InvalidSpecError(UserError):
    """The spec breaks the schema or a semantic rule; carries every problem found."""

    def __init__(self, problems: list[SpecProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class TableMismatchError(UserError):
    """The spec disagrees with the settings stored in the table."""


class SchemaChangeError(UserError):
    """The input's columns are incompatible with the table's schema."""


class BadRecordsError(UserError):
    """Records that cannot be written (no record key, unparseable partition value)."""


class UnreadableFileError(UserError):
    """An input file that cannot be read: corrupt, truncated, or gone before it was read.

    `source` names the file source that holds it (None when none does); `skippable` says
    whether that source has on_bad_file: skip."""

    def __init__(self, source: str | None, path: str, reason: str, skippable: bool = False):
        self.source = source
        self.path = path
        self.reason = reason
        self.skippable = skippable
        where = f"source '{source}'" if source else "an input"
        fix = "; or set on_bad_file: skip on the source to go on without it"
        super().__init__(
            f"{where} cannot read {path}: {reason}; nothing was written and no checkpoint "
            f"moved: fix or remove the file{fix if source and not skippable else ''}"
        )


class CommitConflictError(RunnerError):
    """Another writer changed the files this run replaces."""


class EnvironmentProblem(RunnerError):
    """The machine lacks something the run needs (Java, a writable path)."""


class CatalogError(RunnerError):
    """The catalog (AWS Glue, a Hive Metastore) did not take the table's entry: it did not
    answer, or refused it. The table itself is as its last commit left it."""
