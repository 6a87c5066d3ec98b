"""Pipeline specs: YAML loading, JSON Schema validation, semantic checks, typed model."""

from runner.spec.loader import check_spec_file, load_spec
from runner.spec.model import IndexSpec, KeyGenSpec, PipelineSpec, Source, SparkSettings, Target
from runner.spec.schema_check import schema_path

__all__ = [
    "IndexSpec",
    "KeyGenSpec",
    "PipelineSpec",
    "Source",
    "SparkSettings",
    "Target",
    "check_spec_file",
    "load_spec",
    "schema_path",
]
