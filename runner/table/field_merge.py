"""0.1.0's path of the merger base class; `runner.write.field_merge` is its home now."""

import warnings

from runner.write.field_merge import Merger

warnings.warn(
    "runner.table.field_merge is deprecated: import Merger from runner.write.field_merge",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["Merger"]
