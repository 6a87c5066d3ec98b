"""`runner inspect`: rows and bytes per partition and bucket, and the skew, from the Delta log.

Everything comes from the log's file statistics: no data file is read and no JVM starts.
Skew is the largest bucket over the mean bucket of a partition (empty buckets count, with
0 bytes): 1.0 is a perfectly even spread; a partition whose largest bucket is far above
the mean, or whose buckets are all large, is a candidate for `runner expand`.

A bucket split alone (`runner expand --bucket`, runner/index/layout.py) is listed with its
modulus and depth (how many times it and its parents split since the partition's count):
bucket 7 at modulus 16 in a partition of 4 buckets is at depth 2.

A bucket may hold several file groups (index.file_group_bytes, runner/write/file_groups.py):
each partition counts them, and the text shows a `groups` column once any bucket has more
than one. On a MERGE_ON_READ table, rows are the live rows (stored minus those deletion
vectors delete), and each partition also reports its deleted rows and the buckets with a
group of more than one file: what `runner compact` would fold.
"""

from __future__ import annotations

from typing import Any

from runner.delta.snapshot import open_table
from runner.errors import UserError
from runner.index.layout import BucketLayout
from runner.summary import human_size

PLOTTED_PARTITIONS = 12
EMPTY_BUCKET = {"rows": 0, "deleted_rows": 0, "bytes": 0, "files": 0, "groups": 0}


def inspect_table(uri: str) -> dict[str, Any]:
    snapshot = open_table(uri)
    if snapshot is None:
        raise UserError(f"no Delta table at {uri}")
    if "runner.format.version" not in snapshot.configuration:
        raise UserError(f"{uri} is a Delta table not written by runner (no runner.* settings)")
    layout = BucketLayout.from_configuration(snapshot.configuration)
    partitions: dict[str, dict[int, dict[str, int]]] = {}
    group_ids: set[tuple[str, int, str]] = set()
    for f in snapshot.files():
        bucket = partitions.setdefault(f.partition_path, {}).setdefault(
            f.bucket, dict(EMPTY_BUCKET)
        )
        bucket["rows"] += f.live_records
        bucket["deleted_rows"] += f.deleted_records
        bucket["bytes"] += f.size
        bucket["files"] += 1
        if (f.partition_path, f.bucket, f.file_id) not in group_ids:
            group_ids.add((f.partition_path, f.bucket, f.file_id))
            bucket["groups"] += 1
    report_partitions = [_partition_report(layout, pp, partitions[pp]) for pp in sorted(partitions)]
    return {
        "table": uri,
        "version": snapshot.version,
        "table_type": snapshot.configuration.get("runner.table.type", "COPY_ON_WRITE"),
        "buckets_default": layout.default,
        "buckets_by_partition": dict(layout.partitions),
        "buckets_split": layout.splits_json(),
        "partitions": report_partitions,
        "rows": sum(p["rows"] for p in report_partitions),
        "bytes": sum(p["bytes"] for p in report_partitions),
        "files": sum(p["files"] for p in report_partitions),
        "deleted_rows": sum(p["deleted_rows"] for p in report_partitions),
        # merge-on-read delta files, or the base files of a bulk load's tasks: the next
        # rewrite of the bucket or `runner compact` folds them
        "buckets_with_several_files": sum(p["buckets_with_delta_files"] for p in report_partitions),
    }


def _partition_report(
    layout: BucketLayout, pp: str, stored: dict[int, dict[str, int]]
) -> dict[str, Any]:
    """One partition's line of the report, from its buckets' figures (`stored`)."""
    count = layout.count_for(pp)
    buckets: list[dict[str, Any]] = [
        {"bucket": b, "modulus": m, "depth": _depth(count, m), **stored.get(b, EMPTY_BUCKET)}
        for b, m in _buckets(layout, pp, stored)
    ]
    sizes = [b["bytes"] for b in buckets]
    mean = sum(sizes) / len(sizes)
    return {
        "partition": pp,
        "buckets": len(buckets),
        "count": count,
        "split_buckets": [
            {k: b[k] for k in ("bucket", "modulus", "depth")} for b in buckets if b["depth"]
        ],
        "rows": sum(b["rows"] for b in buckets),
        "bytes": sum(sizes),
        "files": sum(b["files"] for b in buckets),
        "file_groups": sum(b["groups"] for b in buckets),
        "deleted_rows": sum(b["deleted_rows"] for b in buckets),
        "buckets_with_delta_files": sum(1 for b in buckets if b["files"] > b["groups"]),
        "largest_bucket_bytes": max(sizes),
        "empty_buckets": sum(1 for b in buckets if b["files"] == 0),
        "skew": round(max(sizes) / mean, 3) if mean else 0.0,
        "bucket_detail": buckets,
    }


def _buckets(
    layout: BucketLayout, partition_path: str, stored: dict[int, Any]
) -> list[tuple[int, int | None]]:
    """The partition's buckets with their moduli, and any bucket a file names that the
    layout does not have (modulus None: not expected, but never hidden)."""
    leaves: list[tuple[int, int | None]] = list(layout.leaves(partition_path))
    known = {b for b, _ in leaves}
    return sorted(leaves + [(b, None) for b in stored if b not in known])


def _depth(count: int, modulus: int | None) -> int:
    return (modulus // count).bit_length() - 1 if modulus else 0


def render_report(report: dict[str, Any]) -> str:
    mor = report["table_type"] == "MERGE_ON_READ" or report["buckets_with_several_files"] > 0
    grouped = any(
        p["file_groups"] > p["buckets"] - p["empty_buckets"] for p in report["partitions"]
    )
    lines = [
        f"{report['table']}  version {report['version']}  {report['table_type']}  "
        f"{report['rows']:,} rows  {human_size(report['bytes'])} in {report['files']} file(s)"
        + (f"  ({report['deleted_rows']:,} deleted rows in them)" if mor else ""),
        f"buckets: {report['buckets_default']} per partition"
        + (
            f", own counts: {report['buckets_by_partition']}"
            if report["buckets_by_partition"]
            else ""
        ),
        "",
        f"{'partition':<32} {'buckets':>7} {'empty':>5} {'rows':>12} {'bytes':>10} "
        f"{'largest':>10} {'skew':>5}"
        + (f" {'groups':>6}" if grouped else "")
        + (f" {'deleted':>10} {'multi-file':>10}" if mor else ""),
    ]
    for p in report["partitions"]:
        name = p["partition"] or "<table root>"
        lines.append(
            f"{name[:32]:<32} {p['buckets']:>7} {p['empty_buckets']:>5} {p['rows']:>12,} "
            f"{human_size(p['bytes']):>10} {human_size(p['largest_bucket_bytes']):>10} "
            f"{p['skew']:>5.2f}"
            + (f" {p['file_groups']:>6}" if grouped else "")
            + (f" {p['deleted_rows']:>10,} {p['buckets_with_delta_files']:>10}" if mor else "")
        )
        if p["split_buckets"]:
            shown = ", ".join(
                f"{b['bucket']} (modulus {b['modulus']}, depth {b['depth']})"
                for b in p["split_buckets"]
            )
            lines.append(f"  split alone, of {p['count']} buckets: {shown}")
    return "\n".join(lines)


def plot_report(report: dict[str, Any], path: str) -> None:
    """A bar chart of bucket sizes, one panel per partition (the largest ones first)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UserError("--plot needs matplotlib: pip install 'runner[plot]'") from exc
    shown = sorted(report["partitions"], key=lambda p: -p["bytes"])[:PLOTTED_PARTITIONS]
    if not shown:
        raise UserError(f"{report['table']} holds no data: nothing to plot")
    cols = min(3, len(shown))
    rows = (len(shown) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3 * rows), squeeze=False)
    for ax, p in zip(axes.flat, shown, strict=False):
        sizes = [b["bytes"] / 1024 for b in p["bucket_detail"]]
        mean = sum(sizes) / len(sizes)
        ax.bar(range(len(sizes)), sizes, color="#4C72B0")
        ax.axhline(mean, color="#DD8452", linestyle="--", label=f"mean {mean:,.1f} KiB")
        ax.set_title(
            f"{p['partition'] or '<table root>'}: {p['buckets']} buckets, skew {p['skew']:.2f}"
        )
        ax.set_xlabel("bucket")
        ax.set_ylabel("KiB")
        ax.legend(loc="upper right", fontsize="small")
    for ax in list(axes.flat)[len(shown) :]:
        ax.axis("off")
    fig.suptitle(f"{report['table']} (version {report['version']}): bucket sizes")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
