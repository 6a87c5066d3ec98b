"""A real Apache Kafka broker on 127.0.0.1 for tests: one KRaft node, broker and controller.

`kafka_broker` (session fixture) starts Kafka 3.9.1 in a throwaway directory, on free ports of
127.0.0.1, and yields a `KafkaBroker`: its `bootstrap` address and helpers to create topics,
produce records, read low and high watermarks and delete records as retention does. No topic
is created on first use: a test creates its own, named by `unique_topic()` so that no two
tests share one. At the end of the session it stops the broker and deletes the directory. The
broker logs to `broker.log` there; a broker that does not start fails the test with its tail.
The broker itself (its jars, its start and stop) is tests/kafka_server.py's, which the Kafka
benchmark (bench/kafka.py) shares.

What it needs: Java 17+, confluent-kafka (the dev extra) and the broker's jars, from Maven
Central through Maven (`./dev test` installs it as root with apt-get): the first use copies
kafka_2.13 3.9.1 and its runtime dependencies once into `~/.cache/runner/jars/kafka-broker-3.9.1/`
($RUNNER_JAR_CACHE or $XDG_CACHE_HOME move it). Fixtures install nothing: without Java, Maven
or the network the tests that use the broker skip, saying why.

Use it through tests/conftest.py (`from tests.kafka import kafka_broker`): a fixture imported
into several test modules is a separate fixture in each, and would start one broker per module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.kafka_server import BrokerFailed, KafkaBroker, broker_jars, running_broker

__all__ = ["KafkaBroker", "kafka_broker"]


class _Shared:
    """One broker however many modules end up holding the fixture (see the module docstring)."""

    broker: KafkaBroker | None = None
    stack: contextlib.ExitStack | None = None  # leaving it stops the broker
    users = 0


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """A running single-node Kafka broker on 127.0.0.1, with no topics but Kafka's own."""
    if _Shared.broker is None:
        pytest.importorskip("confluent_kafka", reason="needs confluent-kafka (the dev extra)")
        jars, problem = broker_jars()
        if jars is None:
            pytest.skip(f"no Kafka broker: {problem}")
        stack = contextlib.ExitStack()
        try:
            _Shared.broker = stack.enter_context(running_broker(jars))
        except BrokerFailed as exc:
            pytest.fail(str(exc), pytrace=False)
        _Shared.stack = stack
    _Shared.users += 1
    try:
        yield _Shared.broker
    finally:
        _Shared.users -= 1
        if _Shared.users == 0 and _Shared.stack is not None:
            stack, _Shared.stack, _Shared.broker = _Shared.stack, None, None
            stack.close()
