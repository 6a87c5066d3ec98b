"""A key generator class of the user's, named in the spec, next to the spec file."""

from __future__ import annotations

import json
import textwrap
import uuid

import pytest

from runner.commands.keys import preview_keys
from runner.errors import UserError
from tests.helpers import keys_target

MODULE = '''
from pyspark.sql import functions as F
from runner.keygen import KeyColumns, KeyGenerator

class UpperKeys(KeyGenerator):
    """Keys upper-cased; partition path "region=<value>"."""

    def columns(self, schema):
        key = F.upper(F.col(self.spec.record_key[0]).cast("string"))
        region = self.spec.partition_fields[0]
        path = F.concat(F.lit(region + "="), F.col(region))
        return KeyColumns(key, path, F.when(key.isNull(), F.lit("no key")))

class NotAGenerator:
    pass
'''


def _spec(tmp_path, class_path: str):
    return keys_target(tmp_path, {"class": class_path, "partition_fields": "region"}, "id")


@pytest.fixture
def module(tmp_path):
    name = f"user_keys_{uuid.uuid4().hex[:8]}"  # a fresh module: imports are cached
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE))
    return name


def test_a_user_class_beside_the_spec_builds_the_keys(spark, tmp_path, module):
    target = _spec(tmp_path, f"{module}:UpperKeys")
    records = tmp_path / "r.jsonl"
    records.write_text(json.dumps({"id": "ab", "region": "eu"}) + "\n" + '{"region": "us"}\n')
    out = list(preview_keys(spark, target, records, "id string, region string"))
    assert out[0]["record_key"] == "AB" and out[0]["partition_path"] == "region=eu"
    assert out[1] == {"error": "no key"}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_module_here:X", "cannot import no_such_module_here"),
        ("{module}:NotAGenerator", "has no class NotAGenerator that subclasses"),
        ("{module}:Missing", "has no class Missing"),
    ],
)
def test_a_bad_class_is_a_clear_error(spark, tmp_path, module, name, message):
    target = _spec(tmp_path, name.format(module=module))
    records = tmp_path / "r.jsonl"
    records.write_text('{"id": "a", "region": "eu"}\n')
    with pytest.raises(UserError, match=message):
        list(preview_keys(spark, target, records))
