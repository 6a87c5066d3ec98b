"""How any change of a table is carried out: a run's write, an expansion, a hot split, a
compaction, a schema rewrite, a restore. Each of them is an action that plans, writes its
files and says what it commits (a `Commit` and its conflict rule); this module does the
rest, the same way for all of them:

- the guards (`TableChange.guarded`): a storage that refuses a write is named in one line
  (runner/storage/location.py `writing`); a heartbeat under the table tells `runner clean`
  that the files of the change's instant are in flight; on any failure before the commit,
  every file the change wrote under its instant is removed, so the table is as it was;
- the commit (`TableChange.commit`): the `before_commit` fault point (every file written),
  the commit through runner/delta/transaction.py with the action's rule and resolver, then
  the `after_commit` fault point (committed, the action not yet finished);
- a new instant, unless the caller has one (a run's is its own);
- the seconds it took, and the event that says it is done (`TableChange.done`).

The conflict rule of each action sits beside it (a run's in runner/pipeline/commit_stage.py,
an expansion's in expand.py, a compaction's in compact.py); `RewriteRule`, the strictest,
is here: it is shared by the actions that replace the whole table's state (a schema
rewrite, a restore).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from runner import faults
from runner.delta.snapshot import TableSnapshot
from runner.delta.transaction import Commit, ConflictRule, Resolver, commit
from runner.errors import CommitConflictError
from runner.index.naming import new_instant
from runner.storage.in_flight import in_flight
from runner.storage.location import TableLocation, writing
from runner.write.uncommitted import remove_uncommitted

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)

# What an action commits, on the snapshot it was built for; None: nothing to commit.
ToCommit = tuple[TableSnapshot, Commit] | None


class Done(Protocol):
    """An action's summary: its seconds, and its fields for the event that says it is done."""

    seconds: float

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class TableChange:
    """One change of the table at `location`, its files written under `instant` (a new
    one unless given).

    `writer` names it in heartbeats ("run", "expansion", "compaction", "schema rewrite",
    "restore"); `heartbeat` False when the caller holds one for longer (a run holds its own
    from its first file to its after-commit services). `shown` is the table as the user
    named it, for the line that says a write was refused. `spark`: the session whose failed
    job's tasks are waited for before the change's files are removed (None: no Spark job)."""

    location: TableLocation
    writer: str
    spark: SparkSession | None = None
    instant: str = field(default_factory=new_instant)
    heartbeat: bool = True
    shown: str | None = None
    started: float = field(default_factory=time.perf_counter, compare=False)

    @contextmanager
    def guarded(self) -> Iterator[None]:
        """The block that writes the change's files and commits them; a failure in it
        leaves the table as it was (its files removed unless the commit went through)."""
        beating = (
            in_flight(self.location, self.instant, self.writer) if self.heartbeat else nullcontext()
        )
        with writing(self.shown or self.location.uri), beating:
            try:
                yield
            except BaseException:
                remove_uncommitted(self.spark, self.location, self.instant)
                raise

    def commit(
        self,
        prepare: Callable[[], ToCommit],
        rule: ConflictRule,
        resolver: Resolver | None = None,
    ) -> int | None:
        """Every file is written: the version committed with `rule` (and `resolver` for a
        bucket clash), or None when `prepare` finds nothing to commit or the resolver left
        nothing. `prepare` runs after the `before_commit` fault point: it may create the
        table (a first run), which a failure injected there must not leave behind."""
        faults.maybe_fail("before_commit")
        prepared = prepare()
        if prepared is None:
            return None
        snapshot, changes = prepared
        version = commit(snapshot, changes, rule, resolver)
        if version is not None:
            faults.maybe_fail("after_commit")
        return version

    def done(self, event: str, summary: Done) -> None:
        """The change is over: its seconds in `summary`, then `event` with its fields."""
        summary.seconds = round(time.perf_counter() - self.started, 3)
        log.info(event, **summary.to_dict())


@dataclass(frozen=True)
class RewriteRule:
    """A commit that replaces the table's state as a whole (a schema rewrite, a restore)
    goes on only where no other writer committed since it read the table."""

    def conflict(
        self, changes: Commit, read: TableSnapshot, latest: TableSnapshot, attempt: int
    ) -> CommitConflictError | None:
        return CommitConflictError(
            f"another writer committed version {latest.version} of {latest.uri} while the "
            f"{changes.writer} read the table; nothing was committed: run again"
        )
