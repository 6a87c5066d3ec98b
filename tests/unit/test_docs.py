"""Docs that are generated must match their source."""

from pathlib import Path

from runner.spec.docs import spec_reference

ROOT = Path(__file__).resolve().parents[2]


def test_spec_reference_is_generated_from_the_schema():
    on_disk = (ROOT / "docs" / "spec.md").read_text()
    assert on_disk == spec_reference(), "run: runner schema --markdown > docs/spec.md"
