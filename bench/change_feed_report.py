"""The change-feed scenarios (bench/change_feed.py) as their own table in `python -m bench`'s
output."""

from __future__ import annotations

from bench.change_feed import FRACTION
from bench.write import percent, size_text


def render_change_feed(results: list[dict]) -> str:
    """The change-feed scenarios' own table: every system's time and bytes, by kind."""
    head = (
        "| scenario | table | system | change_data_feed | skip_unchanged | wall (s) | job (s) "
        "| bytes written | data | _change_data | deletion vectors | add / cdc actions | checked |"
    )
    lines = [
        "wall: the runner's whole process (JVM start included), delta-spark's merge call in "
        "the bench's session; job: the runner's stages without Spark's start",
        "",
        head,
        "|" + "---|" * 13,
    ]
    for result in results:
        for line in result.get("change_feed", []):
            kind = f"{percent(FRACTION)} upsert" if line["skip_unchanged"] is None else "replay"
            size = line["bytes"]
            job = f"{line['job_s']:.2f}" if line["job_s"] is not None else "(merge call)"
            skip = "" if line["skip_unchanged"] is None else str(line["skip_unchanged"]).lower()
            lines.append(
                f"| {kind} | {line['table_type'] or ''} | {line['system']} | "
                f"{str(line['change_data_feed']).lower()} | {skip} | {line['wall_s']:.2f} | "
                f"{job} | {size_text(size['total'])} | {size_text(size['data'])} | "
                f"{size_text(size['change_data'])} | {size_text(size['deletion_vectors'])} | "
                f"{line['adds']} / {line['cdcs']} | {line['check']} |"
            )
    return "\n".join(lines)
