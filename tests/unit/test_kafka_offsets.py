"""Which offsets a Kafka source's run reads (runner/sources/kafka_offsets.py), no broker."""

from __future__ import annotations

import pytest

from runner.errors import UserError
from runner.sources.kafka_offsets import BrokerOffsets, parse_checkpoint, plan_read
from runner.spec.model import KafkaSpec

WHERE = "source 'orders'"


def kafka(**settings) -> KafkaSpec:
    return KafkaSpec(bootstrap_servers="127.0.0.1:9092", topics=("orders",), **settings)


def broker(earliest: dict[int, int], latest: dict[int, int], topic: str = "orders"):
    return BrokerOffsets(
        {(topic, p): o for p, o in earliest.items()}, {(topic, p): o for p, o in latest.items()}
    )


def spans(read) -> dict[tuple[str, int], tuple[int, int]]:
    return {(r.topic, r.partition): (r.start, r.end) for r in read.ranges}


def test_first_run_reads_from_earliest_and_records_the_end_of_each_partition():
    read = plan_read(kafka(), None, broker({0: 5, 1: 0}, {0: 20, 1: 7}), WHERE)
    assert spans(read) == {("orders", 0): (5, 20), ("orders", 1): (0, 7)}
    assert read.records == 22
    assert read.checkpoint == {"orders": {"0": 20, "1": 7}}


def test_first_run_from_latest_reads_nothing_and_records_where_it_starts():
    read = plan_read(kafka(starting_offsets="latest"), None, broker({0: 5}, {0: 20}), WHERE)
    assert read.records == 0
    assert read.checkpoint == {"orders": {"0": 20}}
    assert read.from_latest and read.summary()["start"] == "latest"  # recorded all the same
    # with a checkpoint, `latest` no longer decides anything
    later = plan_read(
        kafka(starting_offsets="latest"), {("orders", 0): 20}, broker({0: 5}, {0: 20}), WHERE
    )
    assert not later.from_latest and "start" not in later.summary()
    assert not plan_read(kafka(), None, broker({0: 5}, {0: 20}), WHERE).from_latest


def test_first_run_from_chosen_offsets_starts_unnamed_partitions_at_earliest():
    chosen = kafka(starting_offsets={"orders": {1: 4}})
    read = plan_read(chosen, None, broker({0: 2, 1: 0}, {0: 9, 1: 9}), WHERE)
    assert spans(read) == {("orders", 0): (2, 9), ("orders", 1): (4, 9)}


def test_a_later_run_starts_at_the_checkpoint_and_a_new_partition_at_its_earliest():
    since = {("orders", 0): 20}
    read = plan_read(kafka(), since, broker({0: 0, 1: 3}, {0: 25, 1: 8}), WHERE)
    assert spans(read) == {("orders", 0): (20, 25), ("orders", 1): (3, 8)}


def test_a_partition_no_longer_listed_keeps_its_offset_in_the_checkpoint():
    since = {("orders", 0): 20, ("gone", 0): 11}
    read = plan_read(kafka(), since, broker({0: 0}, {0: 20}), WHERE)
    assert read.records == 0
    assert read.checkpoint == {"gone": {"0": 11}, "orders": {"0": 20}}


def test_max_records_per_run_shares_the_cap_by_backlog_and_leaves_the_rest_waiting():
    read = plan_read(
        kafka(max_records_per_run=10), None, broker({0: 0, 1: 0, 2: 0}, {0: 30, 1: 10, 2: 0}), WHERE
    )
    assert read.records == 10
    assert spans(read) == {("orders", 0): (0, 8), ("orders", 1): (0, 2), ("orders", 2): (0, 0)}
    assert read.waiting == 30
    assert read.checkpoint == {"orders": {"0": 8, "1": 2, "2": 0}}
    # the next run goes on from there
    since = parse_checkpoint(read.checkpoint, WHERE)
    after = plan_read(
        kafka(max_records_per_run=100),
        since,
        broker({0: 0, 1: 0, 2: 0}, {0: 30, 1: 10, 2: 0}),
        WHERE,
    )
    assert spans(after) == {("orders", 0): (8, 30), ("orders", 1): (2, 10), ("orders", 2): (0, 0)}
    assert after.waiting == 0


def test_a_cap_smaller_than_the_partition_count_still_reads_that_many_records():
    read = plan_read(
        kafka(max_records_per_run=2), None, broker({0: 0, 1: 0, 2: 0}, {0: 1, 1: 1, 2: 1}), WHERE
    )
    assert read.records == 2
    assert read.waiting == 1


def test_records_removed_by_retention_fail_the_run_naming_partition_and_offsets():
    with pytest.raises(UserError) as error:
        plan_read(kafka(), {("orders", 0): 3}, broker({0: 10}, {0: 15}), WHERE)
    message = str(error.value)
    assert "topic 'orders' partition 0" in message
    assert "offset 3" in message and "earliest offset left is 10" in message
    assert "on_data_loss: skip" in message


def test_records_removed_by_retention_are_counted_and_skipped_when_told():
    read = plan_read(
        kafka(on_data_loss="skip"), {("orders", 0): 3}, broker({0: 10}, {0: 15}), WHERE
    )
    assert spans(read) == {("orders", 0): (10, 15)}
    assert read.summary()["records_lost"] == 7


def test_a_checkpoint_past_the_end_is_a_recreated_topic():
    with pytest.raises(UserError, match="beyond the partition's latest offset 4"):
        plan_read(kafka(), {("orders", 0): 90}, broker({0: 0}, {0: 4}), WHERE)
    read = plan_read(kafka(on_data_loss="skip"), {("orders", 0): 90}, broker({0: 0}, {0: 4}), WHERE)
    assert spans(read) == {("orders", 0): (0, 4)}


def test_a_checkpoint_given_on_the_command_line_is_json():
    assert parse_checkpoint('{"orders": {"0": 5, "1": 7}}', WHERE) == {
        ("orders", 0): 5,
        ("orders", 1): 7,
    }
    with pytest.raises(UserError, match="not a set of Kafka offsets"):
        parse_checkpoint("17", WHERE)


def test_records_removed_while_a_run_reads_them_are_a_user_error_not_a_trace():
    from runner.sources.bad_input import reading

    spark_error = RuntimeError(
        "An error occurred while calling o948.collectToPython.\n: org.apache.spark.sql."
        "kafka010.KafkaIllegalStateException: Some data may have been lost because they are "
        "not available in Kafka any more;\nReason: Could not read records in offset [0, 1) "
        "for topic partition orders-1\nwith consumer group spark-kafka-relation-x-executor."
    )
    with pytest.raises(UserError) as error, reading([]):
        raise spark_error
    assert "offsets [0, 1) of topic-partition orders-1 were removed" in str(error.value)
    assert "no offset moved" in str(error.value)
