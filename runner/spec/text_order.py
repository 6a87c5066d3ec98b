"""A string ordering column (precombine_field, cdc.sequence_by) compares as text ('9' above
'10'): a newer record would lose to an older one without a word. The refusal, said the same
by `runner validate` (runner/commands/spec_facts.py) and by a run
(runner/pipeline/batch.py)."""

from __future__ import annotations

from runner.spec.model import Target


def text_order_refusal(target: Target, type_name: str) -> str:
    """Why the target's ordering column, of the text type `type_name`, is refused (unless
    target.precombine_string_order says text order is meant), and the fix."""
    column = target.precombine_field
    setting, rows = (
        (f"cdc.sequence_by '{column}'", "events")
        if target.cdc
        else (f"precombine_field '{column}'", "records")
    )
    return f"{setting} is a {type_name} column, so {rows} would be ordered as text ('9' above '10')"


def text_order_fix(column: str) -> str:
    """How to declare the ordering column's type, or say text order is meant."""
    return (
        f"Declare its type: in the source's schema (`{column} long`, `{column} timestamp`, "
        f"...) or with CAST({column} AS BIGINT) AS {column} in transform.sql; or set "
        "target.precombine_string_order: true if text order is meant"
    )
