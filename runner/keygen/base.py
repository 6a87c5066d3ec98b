"""The key generator interface: Spark column expressions for record key and partition path.

A generator never runs Python per row. It returns three columns: the record key (string), the
partition path (string) and an error (string, null when the record is fine). A record with an
error is never written under a made-up key; the run reports it with its reason.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql.types import StructType

from runner.spec.model import KeyGenSpec


@dataclass(frozen=True)
class KeyColumns:
    record_key: Column
    partition_path: Column
    error: Column


class KeyGenerator(ABC):
    """One Hudi key generator. Subclasses are registered by spec type in runner.keygen."""

    def __init__(self, spec: KeyGenSpec):
        self.spec = spec

    def input_fields(self) -> tuple[str, ...]:
        """Every input field this generator reads (checked against the input schema first)."""
        return (*self.spec.record_key, *self.spec.partition_fields)

    @abstractmethod
    def columns(self, schema: StructType) -> KeyColumns:
        """Column expressions over a DataFrame with this schema."""
