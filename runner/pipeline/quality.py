"""Row verdicts: which rows of a batch are written, dropped, quarantined or fail the run.

A row is rejected when it cannot be keyed (the key generator's error), breaks a spec
expectation, or is a csv/json record that did not parse (its source's on_bad_record). The
verdict is three Spark columns computed with the key columns, so counting the verdicts
rides on the pass that counts the buckets, and no Python touches the rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType

from runner.delta.snapshot import Group
from runner.errors import BadRecordsError, UserError
from runner.pipeline.key_columns import KEY_ERROR
from runner.pipeline.value_fit import TYPE_ERROR, UNCAST
from runner.sources.kinds import kind_of
from runner.sources.text_records import MALFORMED_FILE, MALFORMED_RAW, MalformedRows, line_of
from runner.spec.model import Expectation, PipelineSpec
from runner.storage.meta_columns import BUCKET, PARTITION_PATH, RECORD_KEY, RESERVED_PREFIX

FATE = "__runner_fate"  # null: the row is written; else drop | quarantine | fail
RULE = "__runner_rule"  # the rule(s) the row broke, comma-separated
REASON = "__runner_reason"  # why, in words
KEY_RULE = "key_generator"  # the rule name of a row that cannot be keyed
MALFORMED_RULE = "malformed_record"  # the rule name of a text record that did not parse
MISMATCH_RULE = "schema_mismatch"  # the rule name of a value that does not fit its column
SAMPLES = 5
_INTERNAL = {RECORD_KEY, PARTITION_PATH, BUCKET, KEY_ERROR, FATE, RULE, REASON}
_INTERNAL |= {MALFORMED_FILE, MALFORMED_RAW, TYPE_ERROR}
# The quarantine table's columns: the run's context, then the rule, reason and record.
QUARANTINE_COLUMNS = (
    *("_pipeline", "_run_id", "_instant", "_batch_id"),
    *("_rule", "_reason", "_record"),
)


def check_expectations(batch: DataFrame, spec: PipelineSpec) -> None:
    """Each expectation must be a boolean expression over the input: refuse it before any work."""
    for rule in spec.expectations:
        try:
            kind = batch.select(F.expr(rule.sql)).schema.fields[0].dataType
        except PySparkException as exc:
            first = str(exc).strip().splitlines()[0]
            raise UserError(
                f"{spec.file}: expectation '{rule.name}': {rule.sql!r} is not a valid Spark SQL "
                f"expression over the input ({first}); its columns are: {', '.join(_shown(batch))}"
            ) from None
        if not isinstance(kind, BooleanType):
            raise UserError(
                f"{spec.file}: expectation '{rule.name}': {rule.sql!r} gives "
                f"{kind.simpleString()}, not a boolean; write a condition such as `x >= 0`"
            )


def _shown(batch: DataFrame) -> list[str]:
    """The batch's columns a user gave it (not the runner's own helper columns)."""
    return [c for c in batch.columns if not c.startswith(RESERVED_PREFIX)]


def add_verdicts(keyed: DataFrame, spec: PipelineSpec) -> DataFrame:
    """`keyed` plus FATE, RULE and REASON. A rule is met only where its SQL is true (NULL
    breaks it). Precedence: a value that does not fit its column's type (the fate is
    target.on_schema_mismatch), a fail rule, then a key error (quarantined when the target
    has a quarantine, else fail), then a quarantine rule, then a drop rule."""
    broken = {rule.name: ~F.coalesce(F.expr(rule.sql), F.lit(False)) for rule in spec.expectations}

    def names(action: str) -> Column:
        return F.concat_ws(
            ", ", *[F.when(broken[r.name], F.lit(r.name)) for r in _rules(spec, action)]
        )

    def reasons(action: str) -> Column:
        return F.concat_ws(
            "; ",
            *[F.when(broken[r.name], F.lit(f"{r.name}: {r.sql}")) for r in _rules(spec, action)],
        )

    key_fate = "quarantine" if spec.target.quarantine else "fail"
    fail, quarantine, drop = names("fail"), names("quarantine"), names("drop")
    # (condition, fate, rule, reason), first match wins
    cases: list[tuple[Column, Column, Column, Column]] = []
    if TYPE_ERROR in keyed.columns:  # a value that does not fit the table's type comes first:
        # the row's cast values are nulls, which the other rules would judge instead
        mismatch = F.col(TYPE_ERROR)
        fate_of = F.lit(spec.target.on_schema_mismatch)
        cases.append((mismatch.isNotNull(), fate_of, F.lit(MISMATCH_RULE), mismatch))
    cases += [
        (fail != "", F.lit("fail"), fail, F.concat(F.lit("breaks "), reasons("fail"))),
        (F.col(KEY_ERROR).isNotNull(), F.lit(key_fate), F.lit(KEY_RULE), F.col(KEY_ERROR)),
        (
            quarantine != "",
            F.lit("quarantine"),
            quarantine,
            F.concat(F.lit("breaks "), reasons("quarantine")),
        ),
        (drop != "", F.lit("drop"), drop, F.concat(F.lit("breaks "), reasons("drop"))),
    ]
    fate, rule, reason = (_first_match([(c[0], c[i]) for c in cases]) for i in (1, 2, 3))
    return keyed.withColumns({FATE: fate, RULE: rule, REASON: reason})


def _first_match(cases: list[tuple[Column, Column]]) -> Column:
    """CASE WHEN c1 THEN v1 WHEN c2 THEN v2 ... END."""
    (condition, value), *rest = cases
    column = F.when(condition, value)
    for condition, value in rest:
        column = column.when(condition, value)
    return column


def add_malformed(judged: DataFrame, malformed: list[MalformedRows]) -> DataFrame:
    """`judged` plus the text records that did not parse, each with its source's
    on_bad_record as its fate and no key columns, so none can be written. They are counted
    with the other verdicts, in the same pass."""
    for bad in malformed:
        source = bad.source
        record = kind_of(source).record_format(source)
        what = f"not a {record} record under the schema of source '{source.name}'"
        reason = F.concat(
            F.lit(f"{what} ("),
            F.col(MALFORMED_FILE),
            F.lit(")"),
        )
        rows = bad.rows.select(
            F.lit(source.on_bad_record).alias(FATE),
            F.lit(MALFORMED_RULE).alias(RULE),
            reason.alias(REASON),
            MALFORMED_FILE,
            MALFORMED_RAW,
        )
        judged = judged.unionByName(rows, allowMissingColumns=True)
    return judged


def _rules(spec: PipelineSpec, action: str) -> list[Expectation]:
    return [r for r in spec.expectations if r.action == action]


@dataclass
class Verdicts:
    """Rejected rows of a batch, counted per fate and per rule."""

    rows_read: int
    by_fate: dict[str, int] = field(default_factory=dict)
    by_rule: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_counts(cls, counts: dict[tuple[str | None, str | None], int]) -> Verdicts:
        """`counts`: rows per (fate, rules) pair, the null fate being the written rows."""
        verdicts = cls(sum(counts.values()))
        for (fate, rules), n in counts.items():
            if fate is None:
                continue
            verdicts.by_fate[fate] = verdicts.by_fate.get(fate, 0) + n
            for name in (rules or "").split(", "):
                verdicts.by_rule[name] = verdicts.by_rule.get(name, 0) + n
        return verdicts

    def count(self, fate: str) -> int:
        return self.by_fate.get(fate, 0)


def bucket_counts_and_verdicts(
    counts: Iterable[tuple[str | None, int | None, str | None, str | None, int]],
) -> tuple[dict[Group, int], Verdicts]:
    """From rows per (partition path, bucket, fate, rule): the rows to write per bucket (the
    null fate) and the rejected rows per fate and rule. Counts of the same key add up."""
    groups: dict[Group, int] = {}
    by_verdict: dict[tuple[str | None, str | None], int] = {}
    for partition_path, bucket, fate, rule, n in counts:
        if fate is None:
            assert partition_path is not None and bucket is not None, "a written row is keyed"
            groups[(partition_path, bucket)] = groups.get((partition_path, bucket), 0) + n
        by_verdict[(fate, rule)] = by_verdict.get((fate, rule), 0) + n
    return groups, Verdicts.from_counts(by_verdict)


def enforce(judged: DataFrame, spec: PipelineSpec, verdicts: Verdicts) -> None:
    """Fail the run, before anything is written, on a row with fate fail or on too large a
    quarantined fraction; the error carries counts per rule and sample rows."""
    failing = verdicts.count("fail")
    if failing:
        key_only = set(verdicts.by_rule) == {KEY_RULE} and not verdicts.count("quarantine")
        what = "cannot be keyed" if key_only else "are rejected"
        raise BadRecordsError(
            f"{failing} record(s) {what}; nothing was written.{_fix(spec, key_only, verdicts)}"
            f"{_per_rule(verdicts)}\nFirst {SAMPLES}:\n" + samples(judged, "fail")
        )
    quarantined = verdicts.count("quarantine")
    limit = spec.target.quarantine.max_fraction if spec.target.quarantine else 0.0
    if quarantined and quarantined > limit * verdicts.rows_read:
        share = quarantined / verdicts.rows_read
        raise BadRecordsError(
            f"{quarantined} of {verdicts.rows_read} record(s) ({share:.2%}) would go to "
            f"quarantine, more than target.quarantine.max_fraction ({limit:.2%}); nothing was "
            f"written.{_per_rule(verdicts)}\nFirst {SAMPLES}:\n" + samples(judged, "quarantine")
        )


def _fix(spec: PipelineSpec, key_only: bool, verdicts: Verdicts) -> str:
    if key_only and not spec.target.quarantine:
        return " Fix them in the transform, or set target.quarantine to set them aside."
    if MISMATCH_RULE in verdicts.by_rule:
        return (
            " Values that do not fit their column's type in the table: fix the input, cast "
            "them in the transform, or set target.on_schema_mismatch: quarantine to set "
            "them aside."
        )
    if MALFORMED_RULE in verdicts.by_rule:
        return (
            " Records that do not parse: fix the input, or set on_bad_record (quarantine or "
            "drop) on the source."
        )
    return ""


def _per_rule(verdicts: Verdicts) -> str:
    return "\nBy rule: " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.by_rule.items()))


def samples(judged: DataFrame, fate: str) -> str:
    rows = judged.where(F.col(FATE) == fate).limit(SAMPLES).collect()
    lines = []
    for row in rows:
        values = row.asDict(recursive=True)
        if values.get(MALFORMED_FILE):
            lines.append(_malformed_sample(values[MALFORMED_FILE], values[MALFORMED_RAW]))
            continue
        # a cast column shows its input value, not the null the cast left
        record = {
            k: values.get(UNCAST + k, v)
            for k, v in values.items()
            if k not in _INTERNAL and not k.startswith(UNCAST)
        }
        lines.append(f"  {row[REASON]}  record: {json.dumps(record, default=str)}")
    return "\n".join(lines)


def _malformed_sample(file: str, raw: str | None) -> str:
    """FILE:LINE: does not parse: RECORD, the line found in the file where it can be."""
    line = line_of(file, raw)
    where = f"{file}:{line}" if line else file
    text = (raw or "").strip()
    return f"  {where}: does not parse under the source's schema: {text[:200]}"


def quarantine_rows(
    judged: DataFrame, input_columns: list[str], context: dict[str, str]
) -> DataFrame:
    """The quarantined rows as the quarantine table stores them: the run's context, the
    rule and reason, and the original record as JSON (so any input schema fits one table)."""
    meta = [F.lit(v).cast("string").alias(f"_{k}") for k, v in context.items()]
    # a column cast to the table's type is recorded with its input value
    given = [
        F.col(UNCAST + c).alias(c) if UNCAST + c in judged.columns else F.col(c)
        for c in input_columns
    ]
    record = F.to_json(F.struct(*given), {"ignoreNullFields": "false"})
    if MALFORMED_RAW in judged.columns:  # a record that did not parse is kept as it was read
        record = F.coalesce(F.col(MALFORMED_RAW), record)
    return judged.where(F.col(FATE) == "quarantine").select(
        *meta,
        F.col(RULE).alias("_rule"),
        F.col(REASON).alias("_reason"),
        record.alias("_record"),
    )
