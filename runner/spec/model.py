"""The spec as frozen dataclasses: everything downstream reads these, never raw dicts.

Every default of the spec is declared here, once; the JSON Schema shows the same ones to
editors, and tests/unit/test_spec_model.py holds the two together, vocabularies included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

# The closed vocabularies of the spec, checked by mypy wherever they are compared.
Operation = Literal["upsert", "insert", "bulk_insert", "delete"]
TableType = Literal["COPY_ON_WRITE", "MERGE_ON_READ"]
BulkInsertSort = Literal["none", "by_key"]  # target.bulk_insert_sort
SchemaEvolution = Literal["add", "widen", "full", "none"]  # target.schema_evolution
# target.on_schema_mismatch: refuse an input column of another type, or cast its values one
# by one, a value that does not fit failing the run or going to quarantine
OnSchemaMismatch = Literal["refuse", "fail", "quarantine"]
MergeMode = Literal[
    "event_time", "commit_time", "partial_update", "overwrite_non_defaults", "custom"
]
# The merge modes that build a key's row from the stored and incoming fields (upsert only).
FIELD_MERGE_MODES: tuple[MergeMode, ...] = ("partial_update", "overwrite_non_defaults", "custom")
RowAction = Literal["fail", "quarantine", "drop"]  # an expectation's, a malformed record's
OnBadFile = Literal["fail", "skip"]
CatalogType = Literal["glue", "hive"]  # target.catalog.type
OnBadRecord = RowAction
IncrementalMode = Literal["new_files", "since_last", "column"]
DeletesMode = Literal["propagate", "ignore"]
ValueFormat = Literal["json", "avro", "raw", "debezium"]  # how a Kafka record's value is decoded
OnTruncate = Literal["fail", "skip"]  # a Debezium truncate event
OnDataLoss = Literal["fail", "skip"]
ExpansionPolicy = Literal["multiple_rehash", "overwrite", "split", "none"]
RestartPolicy = Literal["Never", "OnFailure", "Always"]
ComplexEncoding = Literal["FIELD_PREFIXED", "VALUE_ONLY"]


@dataclass(frozen=True)
class SparkSettings:
    master: str = "local[*]"  # a local run's; under spark-submit its --master wins
    conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Incremental:
    mode: IncrementalMode
    column: str | None = None  # mode column: the column whose largest value is the checkpoint
    # since_last: a source table's deletes are handed on (its change data feed) or ignored
    deletes: DeletesMode = "propagate"


@dataclass(frozen=True)
class JdbcSpec:
    url: str
    table: str | None = None
    query: str | None = None
    user: str | None = None
    password: str | None = None  # a ${env:NAME} reference, resolved at read time
    driver: str | None = None
    jar: str | None = None
    fetch_size: int = 10000
    partition_column: str | None = None
    lower_bound: int | str | None = None
    upper_bound: int | str | None = None
    num_partitions: int = 4


@dataclass(frozen=True)
class DebeziumSpec:
    """value_format debezium: what is done with events that are not a row's change."""

    on_truncate: OnTruncate = "fail"


@dataclass(frozen=True)
class KafkaSpec:
    """A Kafka source's settings: where the records are, how their values decode, and how
    much one run reads."""

    bootstrap_servers: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None  # a Java regular expression (instead of topics)
    value_format: ValueFormat = "json"
    avro_schema: str | None = None  # avro: the writer schema's file (absolute)
    schema_registry_url: str | None = None  # avro in Confluent's wire format
    # the first run's start: "earliest", "latest", or {topic: {partition: offset}}
    starting_offsets: str | Mapping[str, Mapping[int, int]] = "earliest"
    max_records_per_run: int | None = None
    on_data_loss: OnDataLoss = "fail"  # offsets removed by retention since the last run
    options: Mapping[str, str] = field(default_factory=dict)  # Kafka consumer settings
    debezium: DebeziumSpec = field(default_factory=DebeziumSpec)


@dataclass(frozen=True)
class Source:
    name: str
    format: str
    path: str = ""  # empty for jdbc and kafka
    schema: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    incremental: Incremental | None = None
    jdbc: JdbcSpec | None = None
    kafka: KafkaSpec | None = None
    on_bad_file: OnBadFile = "fail"  # a file that cannot be read
    on_bad_record: OnBadRecord = "fail"  # a csv/json record that does not parse


@dataclass(frozen=True)
class TimestampSpec:
    """Hudi's TimestampBased settings (hoodie.keygen.timebased.*), validated.

    Zones are resolved ids Spark uses as Joda would (EST is America/New_York, GMT+8:00 is
    +08:00); None means unset. Formats are Joda patterns, checked to be translatable.
    """

    type: str
    output_format: str
    input_formats: tuple[str, ...] = ()
    input_timezone: str | None = None
    output_timezone: str | None = None
    scalar_time_unit: str = "SECONDS"


@dataclass(frozen=True)
class KeyGenSpec:
    """A key generator's settings, in the structured form (Hudi's names map onto these).

    `partition_fields` holds field names only; for CUSTOM, `partition_types` holds each
    field's part type (SIMPLE or TIMESTAMP), in the same order. `type` is CLASS when
    `class_path` (package.module:Name) names the user's own generator.
    """

    type: str
    record_key: tuple[str, ...]
    partition_fields: tuple[str, ...] = ()
    hive_style_partitioning: bool = False
    url_encode: bool = False
    complex_encoding: ComplexEncoding = "FIELD_PREFIXED"  # a one-field COMPLEX key
    # Hudi's keygenerator.consistent.logical.timestamp.enabled (runner/fields.py FieldStrings)
    consistent_logical_timestamp: bool = False
    partition_types: tuple[str, ...] = ()
    timestamp: TimestampSpec | None = None
    class_path: str | None = None  # package.module:ClassName of a user's generator
    search_path: str | None = None  # where that module may live: the spec's directory


@dataclass(frozen=True)
class MergerSpec:
    """merge_mode custom: the user's merger class (runner.write.field_merge.Merger)."""

    class_path: str  # package.module:ClassName
    properties: Mapping[str, str] = field(default_factory=dict)  # handed to its constructor
    search_path: str | None = None  # where that module may live: the spec's directory


@dataclass(frozen=True)
class ExpansionSpec:
    policy: ExpansionPolicy = "multiple_rehash"
    factor: int = 2
    max_bucket_bytes: int | None = None  # expand (split) automatically past this (None: never)


@dataclass(frozen=True)
class IndexSpec:
    buckets: int
    hash_fields: tuple[str, ...]
    type: str = "BUCKET_HASH_INDEX"
    expansion: ExpansionSpec = field(default_factory=ExpansionSpec)
    # a file group's target size inside a bucket (runner/write/file_groups.py)
    file_group_bytes: int = 128 * 2**20


@dataclass(frozen=True)
class CleaningSpec:
    retain_commits: int = 10
    min_age_hours: int = 1
    after_commit: bool = False


@dataclass(frozen=True)
class CdcSpec:
    """The batch is a change feed: events applied per key in sequence_by order
    (runner/write/cdc_apply.py)."""

    sequence_by: str
    operation_column: str | None = None  # None: every row is an upsert
    delete_values: tuple[str, ...] = ("d", "D", "delete", "DELETE")
    ignore_null_updates: bool = False
    tombstone_hours: int = 168  # a deleted key's tombstone is kept this long


@dataclass(frozen=True)
class ScdSpec:
    """What history a change feed's table keeps: 1, the latest state; 2, every version."""

    type: int = 1
    start_column: str = "valid_from"
    end_column: str = "valid_to"
    current_column: str = "is_current"

    @property
    def history_columns(self) -> tuple[str, str, str]:
        return (self.start_column, self.end_column, self.current_column)


@dataclass(frozen=True)
class CompactionSpec:
    """MERGE_ON_READ: when a bucket's delta files and deleted rows are folded into one file.

    The same thresholds decide, during a run, which touched buckets are rewritten whole
    (copy-on-write) instead of getting deletion vectors and a delta file."""

    max_delta_files: int = 5  # files in one bucket (Hudi compacts after 5 delta commits)
    max_deleted_fraction: float = 0.2  # rows deleted by deletion vectors / rows stored
    after_commit: bool = False


@dataclass(frozen=True)
class DriverMergeSpec:
    """When a batch is merged on the driver, with pyarrow threads, instead of in a Spark
    write job: a small batch then costs no job scheduling, shuffle or Python task start."""

    max_rows: int = 1_000_000  # rows of the batch to write (0: always a Spark job)
    # on a cluster (a master other than local[...]) the touched buckets' stored files must
    # also hold at most this much, so that big rewrites stay spread over the executors
    max_stored_mib: int = 256


@dataclass(frozen=True)
class QuarantineSpec:
    path: str
    max_fraction: float = 0.01


@dataclass(frozen=True)
class CatalogSpec:
    """Where the table is registered by name after its commits (runner/catalog/)."""

    type: CatalogType
    database: str
    table: str
    region: str | None = None  # glue; None: boto3's from the environment
    endpoint_url: str | None = None  # glue; None: boto3's from the environment
    uri: str | None = None  # hive: thrift://host:port

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"


@dataclass(frozen=True)
class Expectation:
    name: str
    sql: str  # a boolean Spark SQL expression; true means the row meets the rule
    action: RowAction = "fail"


@dataclass(frozen=True)
class Target:
    path: str
    key_generator: KeyGenSpec
    index: IndexSpec
    operation: Operation = "upsert"
    table_type: TableType = "COPY_ON_WRITE"
    precombine_field: str | None = None
    precombine_string_order: bool = False  # a string precombine column orders as text
    merge_mode: MergeMode = "event_time"
    merger: MergerSpec | None = None  # merge_mode custom
    delete_marker: str | None = None
    cdc: CdcSpec | None = None  # the batch is a change feed
    # fed by Debezium events: their metadata and Kafka's columns are not stored, and the
    # record key may be the message key's fields, not known yet (runner/spec/debezium.py)
    fed_by_debezium: bool = False
    key_from_message: bool = False
    scd: ScdSpec = field(default_factory=ScdSpec)  # with cdc: the history kept
    filter_dupes: bool = False
    bulk_insert_sort: BulkInsertSort = "none"  # by_key: buckets shuffled, written in sorted groups
    change_data_feed: bool = False  # the table keeps Delta's change data feed
    skip_unchanged: bool = True  # a row equal to its stored row is neither written nor counted
    schema_evolution: SchemaEvolution = "add"  # what an input's schema may change in the table's
    on_schema_mismatch: OnSchemaMismatch = "refuse"  # a column whose type the mode refuses
    # schema_evolution full: top-level columns renamed (old -> new) and dropped, the
    # table's files rewritten once in the new schema
    rename: Mapping[str, str] = field(default_factory=dict)
    drop: tuple[str, ...] = ()
    cleaning: CleaningSpec = field(default_factory=CleaningSpec)
    compaction: CompactionSpec = field(default_factory=CompactionSpec)
    commit_retries: int = 3  # re-merges after another writer changed the same buckets
    quarantine: QuarantineSpec | None = None
    catalog: CatalogSpec | None = None  # registered by name after its commits
    driver_merge: DriverMergeSpec = field(default_factory=DriverMergeSpec)

    @property
    def record_key(self) -> tuple[str, ...]:
        return self.key_generator.record_key

    @property
    def group_bytes(self) -> int | None:
        """The target size of a bucket's file groups; None: one group per bucket, as a
        change feed's target keeps (its deleted keys live in the bucket's files)."""
        return None if self.cdc is not None else self.index.file_group_bytes

    @property
    def keeps_history(self) -> bool:
        """SCD type 2: every version of a key is stored, with its validity columns."""
        return self.cdc is not None and self.scd.type == 2


@dataclass(frozen=True)
class PodResources:
    cores: int
    memory: str  # Spark notation: 512m, 2g
    instances: int = 1


@dataclass(frozen=True)
class SharedVolume:
    """A PersistentVolumeClaim mounted at the same path in the driver and the executors."""

    claim: str
    mount_path: str


@dataclass(frozen=True)
class KubernetesSpec:
    """How `runner render` deploys the pipeline; local runs never read it."""

    namespace: str = "runner"
    service_account: str = "runner"
    secret: str = "runner-secrets"  # holds the values of ${env:NAME} references, key NAME
    driver: PodResources = field(default_factory=lambda: PodResources(cores=1, memory="1g"))
    executor: PodResources = field(
        default_factory=lambda: PodResources(cores=1, memory="2g", instances=2)
    )
    volume: SharedVolume | None = None
    restart_policy: RestartPolicy = "OnFailure"
    retries: int = 3
    retry_interval_seconds: int = 60
    spark_conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HistorySpec:
    """Where every run, expansion, compaction and clean of the pipeline leaves its record."""

    enabled: bool = True
    path: str | None = None  # None: <the table's directory>/_runner_history/<table name>


@dataclass(frozen=True)
class MetricsSpec:
    """Where a run's Prometheus metrics go (runner/observe/metrics.py)."""

    pushgateway: str | None = None  # None: $RUNNER_PUSHGATEWAY, if set
    job: str = "runner"  # the Pushgateway's job label
    textfile: str | None = None  # a .prom file for node-exporter's textfile collector
    port: int | None = None  # --continuous: serve /metrics on this port


@dataclass(frozen=True)
class LineageSpec:
    """OpenLineage events; their transport comes from OPENLINEAGE_URL / OPENLINEAGE_CONFIG."""

    enabled: bool = True
    namespace: str = "runner"  # the job's namespace ($OPENLINEAGE_NAMESPACE wins)


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    sources: tuple[Source, ...]
    target: Target
    file: str
    spark: SparkSettings = field(default_factory=SparkSettings)
    transform_sql: str | None = None
    description: str | None = None
    expectations: tuple[Expectation, ...] = ()
    kubernetes: KubernetesSpec = field(default_factory=KubernetesSpec)
    history: HistorySpec = field(default_factory=HistorySpec)
    metrics: MetricsSpec = field(default_factory=MetricsSpec)
    lineage: LineageSpec = field(default_factory=LineageSpec)
    # one table of a spec that routes topics to tables: its topic (runner/spec/routing.py)
    route_topic: str | None = None
