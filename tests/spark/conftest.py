"""Fixtures of the write-semantics tests: every such test runs on both table types and both
places a batch can be merged, against one reference."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["COPY_ON_WRITE", "MERGE_ON_READ"])
def table_type(request) -> str:
    """Both table types, against the same reference."""
    return request.param


@pytest.fixture(params=["driver", "spark"])
def merged_on(request) -> str:
    """Where a batch is merged: on the driver (small batches, the default) or in a Spark
    write job (driver_merge.max_rows 0, as for a batch past the limit)."""
    return request.param
