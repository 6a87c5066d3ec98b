"""`runner clean`: remove data files no reader needs, like Hudi's cleaner (delta-rs vacuum).

Kept: every file of the last `retain_commits` versions (a reader of any of them, or a time
travel to them, still works) and every file younger than `min_age_hours` (it may belong to
a run that is still writing). Removed: files replaced before those versions, and files no
version ever committed (a run killed before its commit). The Delta log is not changed
except for the vacuum's own start/end entries.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from urllib.parse import unquote

import structlog

from runner.errors import UserError
from runner.ops.summary import human_size
from runner.spec.model import PipelineSpec
from runner.table.snapshot import open_table
from runner.table.storage import TableLocation

log = structlog.get_logger(__name__)


@dataclass
class CleanSummary:
    table: str
    version: int
    kept_versions: list[int]
    dry_run: bool
    files: list[str] = field(default_factory=list)
    bytes: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        versions = f"{self.kept_versions[0]}..{self.kept_versions[-1]}"
        lines = [
            f"{self.table}: {verb} {len(self.files)} file(s), {human_size(self.bytes)}; "
            f"every file of versions {versions} is kept"
        ]
        lines += [f"  {path}" for path in self.files[:20]]
        if len(self.files) > 20:
            lines.append(f"  ... and {len(self.files) - 20} more")
        return "\n".join(lines)


def clean_table(
    spec: PipelineSpec,
    retain_commits: int | None = None,
    min_age_hours: int | None = None,
    dry_run: bool = False,
) -> CleanSummary:
    cleaning = spec.target.cleaning
    retain = retain_commits or cleaning.retain_commits
    min_age = cleaning.min_age_hours if min_age_hours is None else min_age_hours
    snapshot = open_table(spec.target.path)
    if snapshot is None:
        raise UserError(f"no table at {spec.target.path}: nothing to clean")
    version = snapshot.version
    keep = list(range(max(0, version - retain + 1), version + 1))
    listed = snapshot.table.vacuum(
        retention_hours=min_age,
        dry_run=True,
        enforce_retention_duration=False,
        full=True,
        keep_versions=keep,
    )
    sizes = _sizes(snapshot.location, listed)
    if not dry_run and listed:
        removed = snapshot.table.vacuum(
            retention_hours=min_age,
            dry_run=False,
            enforce_retention_duration=False,
            full=True,
            keep_versions=keep,
        )
        sizes = {p: sizes.get(p, 0) for p in removed}
    summary = CleanSummary(
        spec.target.path,
        version,
        keep,
        dry_run,
        files=sorted(unquote(p) for p in sizes),
        bytes=sum(sizes.values()),
    )
    log.info(
        "clean_done" if not dry_run else "clean_planned",
        files=len(summary.files),
        bytes=summary.bytes,
        kept_versions=f"{keep[0]}..{keep[-1]}",
    )
    return summary


def _sizes(table: TableLocation, paths: list[str]) -> dict[str, int]:
    """The size of each listed file (0 when it is gone meanwhile), table-relative paths."""
    if not paths:
        return {}
    fs, root = table.filesystem()
    infos = fs.get_file_info([f"{root}/{unquote(p)}" for p in paths])
    return {p: max(info.size or 0, 0) for p, info in zip(paths, infos, strict=True)}
