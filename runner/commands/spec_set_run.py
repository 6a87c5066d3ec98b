"""`runner run DIR` (or several specs): a set of specs as one run, in one Spark application.

The specs run one after another in the set's order (upstreams first: runner/spec/spec_set.py),
each exactly as `runner run SPEC` runs it, through the same Observer: its own commit,
checkpoints, history record, metrics and lineage. A spec's failure does not stop the others
(unless fail_fast); the specs that read its table, directly or through others, are skipped.

One application: the first run that needs Spark starts it with the set's settings and every
spec's jars (RunOptions.application); each later spec runs on a session of its own
(`SparkSession.newSession()`: the same JVM and executors, its own temporary views and SQL
settings), so nothing one spec leaves in its session (its sources' views, a spark.sql.*
setting of its own) reaches the next.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import structlog

from runner.commands.continuous import repeat
from runner.errors import RunnerError, UserError
from runner.jvm.session import spark_session
from runner.observe.metrics import SetMetrics
from runner.observe.observed import Observer
from runner.observe.record import one_line
from runner.pipeline.context import Application, RunOptions
from runner.pipeline.inputs import application_jars
from runner.pipeline.shared_spark import SharedSpark
from runner.pipeline.spec_set import Member, SpecSet, upstreams_of
from runner.sources.kafka import topic_names
from runner.spec.model import SparkSettings
from runner.spec.routing import is_routed, route
from runner.spec.secrets import resolve
from runner.summary import RunSummary

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)

# the outcome column of the summary table: a failure's whole message is in its own line
OUTCOME_CHARS = 100

Result = Literal["committed", "nothing new", "failed", "skipped"]


@dataclass(frozen=True)
class SpecOutcome:
    """How one spec of the set ended."""

    member: Member
    result: Result
    summary: RunSummary | None = None
    reason: str = ""  # failed: the error on one line; skipped: why
    seconds: float = 0.0
    error: Exception | None = field(default=None, compare=False)  # failed: the error

    def text(self) -> str:
        if self.result == "committed":
            assert self.summary is not None
            return f"committed version {self.summary.version}"
        if self.result in ("failed", "skipped"):
            text = f"{self.result}: {self.reason}"
            return text if len(text) <= OUTCOME_CHARS else text[: OUTCOME_CHARS - 3] + "..."
        return self.result

    @property
    def rows(self) -> str:
        return f"{self.summary.rows_read:,}" if self.summary is not None else "-"


@dataclass
class SetRun:
    """The set's runs, in its order, in one application."""

    specs: SpecSet
    shared: SharedSpark
    name: str  # the application's
    console_progress: bool = False
    fail_fast: bool = False
    parallel: int = 1  # specs run at once, each in a FAIR scheduler pool of its own
    base: SparkSession | None = field(default=None, init=False)  # the first session
    # each spec's, kept over rounds (their counters add up); metrics on one endpoint
    observers: dict[str, Observer] = field(default_factory=dict, init=False)
    metrics_served: bool = field(default=False, init=False)
    # this round's, by the name of each spec run: a routed spec's by the topic's table
    upstreams: dict[str, tuple[str, ...]] = field(default_factory=dict, init=False)

    def run(self, on_done: Callable[[SpecOutcome], None]) -> list[SpecOutcome]:
        """Every spec's outcome, in the set's order; `on_done` gets each as it ends."""
        log.info("spec_set_started", specs=[m.name for m in self.specs.members])
        specs = tuple(m.spec for m in self.specs.members)
        application = Application(self.name, self._settings(), specs)
        members = self._routed(application)
        self.upstreams = upstreams_of(members)
        if self.parallel > 1:
            return self._run_at_once(members, application, on_done)
        outcomes: dict[str, SpecOutcome] = {}
        for member in members:
            outcome = self._skipped(member, outcomes) or self._run_one(member, application)
            outcomes[member.name] = outcome
            on_done(outcome)
        return list(outcomes.values())

    def _settings(self) -> SparkSettings:
        """The application's settings: the set's, with FAIR scheduling to run specs at once."""
        settings = self.shared.settings
        if self.parallel == 1:
            return settings
        return replace(settings, conf={**settings.conf, "spark.scheduler.mode": "FAIR"})

    def _skipped(self, member: Member, done: dict[str, SpecOutcome]) -> SpecOutcome | None:
        why = self._why_skip(member, done)
        if not why:
            return None
        log.warning("spec_skipped", pipeline=member.name, reason=why)
        return SpecOutcome(member, "skipped", reason=why)

    def _run_at_once(
        self,
        members: list[Member],
        application: Application,
        on_done: Callable[[SpecOutcome], None],
    ) -> list[SpecOutcome]:
        """Up to `parallel` specs at a time, each once its upstreams are done, in the set's
        order; each in a FAIR pool named after it, so a large spec does not hold up the
        small ones. Their outcomes in the set's order."""
        self._started(application)  # here: the threads share it, none races to start it
        waiting = list(members)
        outcomes: dict[str, SpecOutcome] = {}
        with ThreadPoolExecutor(self.parallel, thread_name_prefix="spec") as pool:
            running: dict[Future[SpecOutcome], Member] = {}
            while waiting or running:
                for member in self._ready(waiting, running.values(), outcomes):
                    skipped = self._skipped(member, outcomes)
                    if skipped is None and len(running) >= self.parallel:
                        break
                    waiting.remove(member)
                    if skipped is not None:
                        outcomes[member.name] = skipped
                        on_done(skipped)
                    else:
                        running[pool.submit(self._in_pool, member, application)] = member
                if running:
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        outcome = future.result()
                        outcomes[running.pop(future).name] = outcome
                        on_done(outcome)
        return [outcomes[m.name] for m in members]

    def _ready(
        self, waiting: list[Member], running: Iterable[Member], done: dict[str, SpecOutcome]
    ) -> list[Member]:
        """The waiting specs whose upstreams in the set have all ended, in the set's order."""
        busy = {m.name for m in running}
        pending = busy | {m.name for m in waiting}
        return [m for m in waiting if not any(u in pending for u in self.upstreams.get(m.name, ()))]

    def _in_pool(self, member: Member, application: Application) -> SpecOutcome:
        """`member`'s run, its Spark jobs in the FAIR pool of its name (a property of the
        thread: the pool's next spec on this thread sets its own)."""
        assert self.base is not None
        self.base.sparkContext.setLocalProperty("spark.scheduler.pool", member.name)
        return self._run_one(member, application)

    def _routed(self, application: Application) -> list[Member]:
        """The set's members, a spec that routes topics to tables as one member per topic
        the brokers list now (runner/spec/routing.py), in the order of the topics' names."""
        members: list[Member] = []
        for member in self.specs.members:
            if not is_routed(member.spec):
                members.append(member)
                continue
            base = self._started(application)
            source = member.spec.sources[0]
            assert source.kafka is not None
            topics = topic_names(base, source.kafka, f"source '{source.name}'")
            log.info("topics_routed", pipeline=member.name, topics=topics)
            members += [Member(route(member.spec, topic), member.file) for topic in topics]
        return members

    def _why_skip(self, member: Member, done: dict[str, SpecOutcome]) -> str:
        """Why `member` does not run ('' when it runs): an upstream failed or was skipped,
        or, with fail_fast, a spec failed before it."""
        for upstream in self.upstreams.get(member.name, ()):
            before = done.get(upstream)
            if before is not None and before.result == "failed":
                return f"because {upstream} failed"
            if before is not None and before.result == "skipped":
                return before.reason
        failed = [o.member.name for o in done.values() if o.result == "failed"]
        if self.fail_fast and failed:
            return f"because {failed[0]} failed (--fail-fast)"
        return ""

    def _run_one(self, member: Member, application: Application) -> SpecOutcome:
        started = time.monotonic()
        options = RunOptions(console_progress=self.console_progress, application=application)
        try:
            summary = self._observer(member).run(self._session(member, application), options)
        except Exception as failure:
            seconds = time.monotonic() - started
            log.warning("spec_failed", pipeline=member.name, error=type(failure).__name__)
            return SpecOutcome(
                member, "failed", reason=_reason(failure), seconds=seconds, error=failure
            )
        finally:
            self.base = self.base or _active_session()
            structlog.contextvars.clear_contextvars()  # the run's id and name end with it
        result: Result = "nothing new" if summary.nothing_new else "committed"
        return SpecOutcome(member, result, summary, seconds=time.monotonic() - started)

    def _started(self, application: Application) -> SparkSession:
        """The application's first session, started now if no run has started it."""
        if self.base is None:
            jars = application_jars(application)
            self.base = spark_session(application.settings, application.name, jars)
        return self.base

    def _observer(self, member: Member) -> Observer:
        observer = self.observers.get(member.name)
        if observer is None:
            observer = self.observers[member.name] = Observer(member.spec)
            observer.metrics.served_with_a_set = self.metrics_served
        return observer

    def _session(self, member: Member, application: Application) -> SparkSession | None:
        """The session `member` runs on: a new one of the application, with the spec's own
        spark.sql.* settings; None while no run has needed Spark (the run starts it), unless
        the spec has settings of its own (then it is started here, for them)."""
        own = resolve(dict(self.shared.own.get(member.name, {})), where="spark.conf")
        if own:
            self._started(application)
        if self.base is None:
            return None
        session = self.base.newSession()
        for key, value in own.items():
            if not session.conf.isModifiable(key):
                raise UserError(
                    f"{member.file}: spark.conf {key} is fixed when the Spark application "
                    "starts, so it cannot differ between the specs of a set: give every "
                    "spec the same value, or run this spec apart"
                )
            session.conf.set(key, value)
        return session


def _reason(failure: Exception) -> str:
    """The failure on one line, as `runner run` would say it."""
    if isinstance(failure, RunnerError):
        return one_line(failure)
    return f"{type(failure).__name__}: {one_line(failure)}"


def _active_session() -> SparkSession | None:
    if "pyspark.sql" not in sys.modules:  # no run so far needed Spark: no JVM yet
        return None
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def summary_table(outcomes: list[SpecOutcome]) -> list[str]:
    """The set's summary: a line per spec (outcome, rows read, seconds), then the counts."""
    width = max(len(o.member.name) for o in outcomes)
    lines = [f"{'spec':<{width}}  {'outcome':<40}  {'rows':>10}  {'seconds':>7}"]
    for o in outcomes:
        lines.append(f"{o.member.name:<{width}}  {o.text():<40}  {o.rows:>10}  {o.seconds:>7.1f}")
    counts = {r: sum(o.result == r for o in outcomes) for r in _RESULTS}
    shown = ", ".join(f"{n} {r}" for r, n in counts.items() if n)
    total = sum(o.seconds for o in outcomes)
    lines.append(f"{len(outcomes)} spec(s): {shown} ({total:.1f}s)")
    return lines


_RESULTS: tuple[Result, ...] = ("committed", "nothing new", "failed", "skipped")


@dataclass(frozen=True)
class SetRounds:
    count: int
    commits: int
    failed: bool  # a spec failed in the last round


def run_rounds(
    set_run: SetRun,
    interval_seconds: float,
    on_done: Callable[[SpecOutcome], None],
    on_round: Callable[[int, list[SpecOutcome]], None],
) -> SetRounds:
    """`runner run DIR --continuous`: the set's rounds in its one application until SIGTERM
    or SIGINT (the round in flight ends first). A spec that fails fails its round only: the
    next round runs it again, and the others go on. The first spec with a metrics.port
    serves every spec's metrics on it (runner/observe/metrics.py SetMetrics)."""
    members = set_run.specs.members
    port = next((m.spec.metrics.port for m in members if m.spec.metrics.port is not None), None)
    metrics = SetMetrics(lambda: [o.metrics for o in list(set_run.observers.values())])
    if port is not None:
        metrics.serve(port)
        set_run.metrics_served = True
    commits, last = 0, []

    def one_round(number: int) -> None:
        nonlocal commits, last
        last = set_run.run(on_done)
        commits += sum(o.result == "committed" for o in last)
        on_round(number, last)

    try:
        count = repeat(interval_seconds, one_round)
    finally:
        metrics.close()
    log.info("stopped", rounds=count, commits=commits)
    if set_run.base is not None:
        set_run.base.stop()
    return SetRounds(count, commits, any(o.result == "failed" for o in last))
