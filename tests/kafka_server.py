"""A real Apache Kafka broker on 127.0.0.1: one KRaft node, broker and controller, started from
Maven's jars. tests/kafka.py makes it a pytest fixture; bench/kafka.py starts one for the Kafka
benchmark.

`running_broker(jars)` starts Kafka 3.9.1 in a throwaway directory, on free ports of 127.0.0.1,
and yields a `KafkaBroker`: its `bootstrap` address and helpers to create topics, produce
records, read low and high watermarks and delete records as retention does. On leaving it stops
the broker and deletes the directory. The broker logs to `broker.log` there; a broker that does
not start raises `BrokerFailed` with its tail.

`broker_jars()` finds the broker's jars, or says why it cannot: they need Java 17+ and come from
Maven Central through Maven, copied once (kafka_2.13 3.9.1 and its runtime dependencies) into
`~/.cache/runner/jars/kafka-broker-3.9.1/` ($RUNNER_JAR_CACHE or $XDG_CACHE_HOME move it). The
clients need confluent-kafka (the dev extra).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import functools
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.errors import EnvironmentProblem
from runner.jvm.maven import DEPENDENCY_PLUGIN, cache_root, run_maven
from tests.s3 import free_port

if TYPE_CHECKING:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

KAFKA_VERSION = "3.9.1"
# kafka_2.13 logs through slf4j and leaves the binding to the application: reload4j is the one
# Kafka's own distribution ships (log4j 1 API, configured by LOG4J below).
ARTIFACTS = (f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}", "org.slf4j:slf4j-reload4j:1.7.36")
LISTING = "jars.txt"  # written last into a fetch: its presence marks a complete directory
START_TIMEOUT_S = 60
JVM_OPTIONS = ("-Xmx384m",)  # G1 by default: less resident memory here than SerialGC
LOG4J = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
"""
SERVER = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={data}
# A test creates its topics: a misspelt name fails instead of reading nothing.
auto.create.topics.enable=false
num.partitions=1
# One node: internal topics of one replica, one partition (50 by default: seconds to create).
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
group.initial.rebalance.delay.ms=0
# Retention tests: a topic's retention.ms (and a small segment.ms) acts within seconds.
log.retention.check.interval.ms=1000
# The log cleaner's buffer: 16 MB of the small heap, not 128.
log.cleaner.dedupe.buffer.size=16777216
"""
POM = """\
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
  <groupId>runner.tests</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <dependencies>{}
  </dependencies>
</project>
"""
PRODUCER = {
    "acks": "all",
    "linger.ms": 0,
    # One request in flight: a retried batch cannot overtake the next, so records sent to one
    # partition get offsets in the order they were given.
    "max.in.flight.requests.per.connection": 1,
    "partitioner": "murmur2_random",  # the Java client's choice for keyed records
    "message.timeout.ms": 30_000,
    "queue.buffering.max.messages": 10_000_000,  # produce() queues a test's records at once
    # A missing topic fails in a second (30 s by default): create_topic waits for its leaders.
    "topic.metadata.propagation.max.ms": 1_000,
}
QUIET = {"stdin": subprocess.DEVNULL, "capture_output": True, "text": True}
TOPIC_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]+")


# ---------------------------------------------------------------- the client side


@dataclass
class KafkaBroker:
    """A running broker ("127.0.0.1:PORT") and helpers; `admin` and `producer` made once."""

    bootstrap: str
    log: Path = field(repr=False)  # the broker's log4j output
    _names: Iterator[int] = field(default_factory=itertools.count, repr=False)

    @functools.cached_property
    def admin(self) -> AdminClient:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap})

    @functools.cached_property
    def producer(self) -> Producer:
        from confluent_kafka import Producer

        return Producer({"bootstrap.servers": self.bootstrap, **PRODUCER})

    def unique_topic(self, prefix: str = "topic") -> str:
        """A topic name no other test uses: the prefix (made a legal name), then a number."""
        return f"{TOPIC_CHARACTERS.sub('-', prefix)[:200]}-{next(self._names)}"

    def create_topic(
        self, name: str, partitions: int = 1, *, config: Mapping[str, str] | None = None
    ) -> None:
        """Create a topic (`config`: e.g. retention.ms, segment.ms); wait until it is served."""
        from confluent_kafka.admin import NewTopic

        topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})
        self.admin.create_topics([topic], operation_timeout=30)[name].result(timeout=60)
        self._wait_for_partitions(name, partitions)

    def add_partitions(self, name: str, total: int) -> None:
        """Grow a topic to `total` partitions; wait until they are served."""
        from confluent_kafka.admin import NewPartitions

        futures = self.admin.create_partitions([NewPartitions(name, total)], operation_timeout=30)
        futures[name].result(timeout=60)
        self._wait_for_partitions(name, total)
        if "producer" in self.__dict__:  # it would not see the new partitions for minutes
            self.producer.list_topics(name, timeout=10)

    def produce(
        self,
        topic: str,
        values: Sequence[bytes | str | None],
        *,
        keys: Sequence[bytes | str | None] | None = None,
        partitions: Sequence[int | None] | None = None,
        timestamps: Sequence[int | None] | None = None,
        headers: Sequence[Sequence[tuple[str, bytes | str | None]] | None] | None = None,
    ) -> list[tuple[int, int]]:
        """Write records (value None: a tombstone) and wait until all are acknowledged.

        Each of `keys`, `partitions`, `timestamps` (ms since the epoch, the record's
        CreateTime) and `headers` ((name, value) pairs) has one entry per value; None leaves
        that record's to Kafka (a keyed record's partition is the Java client's murmur2).
        Returns each record's (partition, offset), in the order given.
        """
        extras = {"key": keys, "partition": partitions, "timestamp": timestamps, "headers": headers}
        for name, given in extras.items():
            if given is not None and len(given) != len(values):
                raise ValueError(f"{len(given)} entries for `{name}`, {len(values)} values")
        delivered: list[tuple[int, int] | None] = [None] * len(values)
        errors: list[str] = []

        def done(index: int, err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"record {index}: {err}")
            delivered[index] = (msg.partition(), msg.offset())

        for i, value in enumerate(values):
            kwargs = {k: v[i] for k, v in extras.items() if v is not None and v[i] is not None}
            self.producer.produce(topic, value, on_delivery=functools.partial(done, i), **kwargs)
            self.producer.poll(0)
        left = self.producer.flush(60)
        if errors or left:
            raise RuntimeError(f"producing to {topic} failed: {errors or f'{left} unsent'}")
        return [d for d in delivered if d is not None]

    def end_offsets(self, topic: str) -> dict[int, int]:
        """{partition: high watermark}: the offset the next record will get."""
        return self._offsets(topic, latest=True)

    def earliest_offsets(self, topic: str) -> dict[int, int]:
        """{partition: low watermark}: the first offset still there."""
        return self._offsets(topic, latest=False)

    def delete_records(self, topic: str, before: Mapping[int, int]) -> dict[int, int]:
        """Delete each partition's records before an offset, as retention does (the low
        watermark moves there); returns the new {partition: low watermark}."""
        from confluent_kafka import TopicPartition

        wanted = [TopicPartition(topic, p, offset) for p, offset in before.items()]
        futures = self.admin.delete_records(wanted, operation_timeout=30)
        return {tp.partition: f.result(timeout=60).low_watermark for tp, f in futures.items()}

    def close(self) -> None:
        """Flush and drop the cached clients (before the broker stops: no reconnect noise)."""
        producer = self.__dict__.pop("producer", None)
        if producer is not None:
            producer.flush(10)
        self.__dict__.pop("admin", None)

    def _offsets(self, topic: str, latest: bool) -> dict[int, int]:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        spec = OffsetSpec.latest() if latest else OffsetSpec.earliest()
        meta = self.admin.list_topics(topic, timeout=10).topics[topic]
        if meta.error is not None:
            raise RuntimeError(f"topic {topic}: {meta.error}")
        wanted = {TopicPartition(topic, p): spec for p in meta.partitions}
        futures = self.admin.list_offsets(wanted, request_timeout=30)
        return {tp.partition: f.result(timeout=60).offset for tp, f in futures.items()}

    def _wait_for_partitions(self, topic: str, count: int, timeout_s: float = 30) -> None:
        """Until each partition's leader answers for it: metadata names a leader a moment
        before that broker serves the partition (NOT_LEADER_FOR_PARTITION meanwhile)."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if len(self._offsets(topic, latest=True)) == count:
                    return
                problem = f"not yet {count} partitions"
            except (KafkaException, RuntimeError) as exc:
                problem = str(exc)
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {topic} not ready after {timeout_s} s: {problem}")
            time.sleep(0.1)


# ---------------------------------------------------------------- the broker's jars


def jar_dir() -> Path:
    return cache_root() / f"kafka-broker-{KAFKA_VERSION}"


def complete_jars(directory: Path) -> bool:
    """Whether a fetch into `directory` finished: its listing names only readable jars."""
    try:
        names = (directory / LISTING).read_text().split()
    except OSError:
        return False
    return bool(names) and all(zipfile.is_zipfile(directory / n) for n in names)


def fetch_jars(final: Path, artifacts: Sequence[str]) -> None:
    """Copy `artifacts` (group:artifact:version) and their runtime dependencies into `final`
    through a staging directory renamed into place when complete, so that a killed fetch
    never leaves a half directory there. EnvironmentProblem when Maven cannot."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        jars = staging / "jars"
        _copy_dependencies(staging, jars, artifacts)
        names = sorted(p.name for p in jars.glob("*.jar"))
        if not names or not all(zipfile.is_zipfile(jars / n) for n in names):
            raise EnvironmentProblem(f"Maven left no or incomplete jars in {jars}")
        (jars / LISTING).write_text("\n".join(names) + "\n")
        if final.exists() and not complete_jars(final):
            shutil.rmtree(final, ignore_errors=True)  # an incomplete earlier copy
        with contextlib.suppress(OSError):  # another process got there first: its copy serves
            jars.rename(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not complete_jars(final):
        raise EnvironmentProblem(f"the jars in {final} are incomplete after fetching them")


def _copy_dependencies(project: Path, into: Path, artifacts: Sequence[str]) -> None:
    """`mvn dependency:copy-dependencies` (runtime scope) of a pom naming `artifacts`."""
    what = f"`mvn dependency:copy-dependencies` of {', '.join(artifacts)}"
    tags = "<dependency><groupId>{}</groupId><artifactId>{}</artifactId><version>{}</version>"
    dependencies = "".join(f"\n    {tags.format(*c.split(':'))}</dependency>" for c in artifacts)
    (project / "pom.xml").write_text(POM.format(dependencies))
    goal = [f"{DEPENDENCY_PLUGIN}:copy-dependencies", f"-DoutputDirectory={into}"]
    run_maven([*goal, "-DincludeScope=runtime"], project, what)


@functools.cache
def broker_jars() -> tuple[Path | None, str | None]:
    """(jar directory, None) or (None, why the broker cannot run). Maven runs at most once."""
    return cached_jars(
        jar_dir(), ARTIFACTS, "the Kafka broker", f"Kafka {KAFKA_VERSION}'s broker jars"
    )


def cached_jars(
    final: Path, artifacts: Sequence[str], who: str, what: str
) -> tuple[Path | None, str | None]:
    """(`final`, None) once `artifacts` and their dependencies are there, fetched if need be,
    or (None, why `who` cannot run: no Java, or `what` cannot be fetched)."""
    from runner.jvm.session import java_problem  # not at import: conftest imports this module

    problem = java_problem()
    if problem:
        return None, f"{who} needs Java: {problem}"
    if not complete_jars(final):
        try:
            fetch_jars(final, artifacts)
        except EnvironmentProblem as exc:
            return None, (
                f"{what} are not in {final} and cannot be fetched: {exc} (`./dev test` "
                "installs Maven when run as root with apt-get)"
            )
    return final, None


# ---------------------------------------------------------------- the broker


def _cluster_id() -> str:
    """A random id in Kafka's form: 16 bytes in base64url, not starting with '-' (as Kafka's)."""
    raw = bytearray(uuid.uuid4().bytes)
    raw[0] &= 0x7F  # the first character is then one of A-Z a-f
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


if sys.platform == "linux":
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before any fork

    def die_with_parent() -> None:
        """In the broker's process before exec: SIGTERM when its parent (pytest, the bench)
        dies, even by SIGKILL, so a killed run leaves no broker behind (PR_SET_PDEATHSIG)."""
        _prctl(1, signal.SIGTERM)
else:
    die_with_parent = None


class BrokerFailed(RuntimeError):
    """The broker did not start; the message holds the tail of its log."""


class JvmService:
    """A Java service from `jars` in its own temp dir: its log4j log, the JVM's own output,
    its properties file; `launch` starts it (the Kafka broker, a Kafka Connect worker)."""

    jvm_options: tuple[str, ...] = JVM_OPTIONS

    def __init__(self, jars: Path, prefix: str, log_name: str, properties_name: str) -> None:
        self.base = Path(tempfile.mkdtemp(prefix=prefix))
        self.log = self.base / log_name  # log4j's
        self.console = self.base / "console.log"  # the JVM's own stdout and stderr
        self.properties = self.base / properties_name
        (self.base / "log4j.properties").write_text(LOG4J.format(log=self.log))
        home = os.environ.get("JAVA_HOME")  # the java that java_problem() checked
        self.java = [os.path.join(home, "bin", "java") if home else "java", "-cp", f"{jars}/*"]
        self.java.append(f"-Dlog4j.configuration=file:{self.base / 'log4j.properties'}")
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    def launch(self, main: str) -> None:
        """The JVM running `main` with the properties file, its output to the console log."""
        with self.console.open("ab") as out:
            self.process = subprocess.Popen(
                [*self.java, *self.jvm_options, main, str(self.properties)],
                cwd=self.base,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )

    def port_taken(self) -> bool:
        """Someone took a port between our probe and the service's bind."""
        return "Address already in use" in read_log(self.log)

    def tail(self) -> str:
        return log_tail(self.log, self.console)


class Node(JvmService):
    """One KRaft node (broker and controller) in its own temp dir."""

    def __init__(self, jars: Path) -> None:
        super().__init__(jars, "runner-kafka-", "broker.log", "server.properties")

    def start(self) -> str:
        """Format the storage, start the broker and wait until it answers; its bootstrap."""
        for attempt in range(3):
            shutil.rmtree(self.base / "data", ignore_errors=True)
            self.log.unlink(missing_ok=True)  # so that the check below reads this attempt's
            self.port, controller = free_port(), free_port()
            self.properties.write_text(
                SERVER.format(port=self.port, controller=controller, data=self.base / "data")
            )
            self._format()
            self.launch("kafka.Kafka")
            if self._wait_until_answering():
                return f"127.0.0.1:{self.port}"
            if not self.port_taken() or attempt == 2:  # else try other ports
                break
        code = self.process and self.process.returncode
        raise BrokerFailed(f"the Kafka broker exited {code} while starting\n{self.tail()}")

    def _format(self) -> None:
        cmd = [*self.java, "-Xmx128m", "kafka.tools.StorageTool", "format"]
        cmd += ["-t", _cluster_id(), "-c", str(self.properties)]
        res = subprocess.run(cmd, cwd=self.base, timeout=120, **QUIET)
        if res.returncode != 0:
            raise BrokerFailed(
                f"formatting the Kafka broker's storage exited {res.returncode}: "
                f"{(res.stderr or res.stdout).strip()[-2000:]}"
            )

    def _wait_until_answering(self) -> bool:
        """True once the broker answers a metadata request, False if it exited."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        assert self.process is not None
        admin = None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            with socket.socket() as probe:  # no client: it would log refused connections
                listening = probe.connect_ex(("127.0.0.1", self.port)) == 0
            if admin is None and listening:
                admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.port}"})
            if admin is not None:
                try:
                    if admin.list_topics(timeout=2).brokers:
                        return True
                except KafkaException:
                    pass
            time.sleep(0.2)
        raise BrokerFailed(
            f"the Kafka broker did not answer on 127.0.0.1:{self.port} within "
            f"{START_TIMEOUT_S} s\n{self.tail()}"
        )

    def stop(self) -> None:
        """SIGTERM (a controlled shutdown; SIGKILL after 30 s), then delete the directory."""
        try:
            terminate(self.process)
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


def log_tail(log_file: Path, console: Path) -> str:
    """A JVM service's log: its first errors (before its many shutdown lines), its end, and
    the JVM's own output."""
    log = read_log(log_file).splitlines()
    errors = [line for line in log if re.search(r" ERROR |Exception: ", line)][:8]
    text = [f"--- {log_file} ---", *errors, "...", *log[-20:], f"--- {console} ---"]
    return "\n".join([*text, read_log(console)[-2000:]])


def read_log(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def terminate(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM a JVM service (it stops in order), SIGKILL after 30 s."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@contextlib.contextmanager
def running_broker(jars: Path) -> Iterator[KafkaBroker]:
    """A broker started from `jars` (broker_jars()), with no topics but Kafka's own; stopped,
    and its directory deleted, on leaving."""
    node = Node(jars)
    try:
        broker = KafkaBroker(bootstrap=node.start(), log=node.log)
        try:
            yield broker
        finally:
            broker.close()
    finally:
        node.stop()
