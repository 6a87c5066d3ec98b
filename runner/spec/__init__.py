"""Pipeline specs: YAML loading, JSON Schema validation, semantic checks, typed model."""

from runner.spec.loader import check_spec_file, load_spec, schema_path
from runner.spec.model import IndexSpec, KeyGenSpec, PipelineSpec, Source, SparkSettings, Target

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
