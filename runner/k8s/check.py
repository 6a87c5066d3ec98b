"""Offline checks of manifests against the spark-operator's CRD schemas, unknown fields refused.

Kubernetes prunes unknown fields of a custom resource silently, so `driver.memroy: 2g` would
apply and be ignored. Here every object schema that lists its properties (and does not keep
unknown fields on purpose) gets `additionalProperties: false`, so such a typo fails, with the
file, the document and the field path named. The strings the operator and Spark parse (the
schedule, pod memory, CPU and memory limits) are read as they read them
(runner/k8s/values.py). ConfigMaps are checked against a small schema of
their own; other kinds are reported as not checked.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from runner.k8s.values import value_problems
from runner.spec.located import dotted

GROUP_VERSION = "sparkoperator.k8s.io/v1beta2"
CRD_FILES = {
    "SparkApplication": "sparkoperator.k8s.io_sparkapplications.yaml",
    "ScheduledSparkApplication": "sparkoperator.k8s.io_scheduledsparkapplications.yaml",
}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_DNS_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
_METADATA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": _DNS_NAME, "maxLength": 253},
        "namespace": {"type": "string", "pattern": _DNS_NAME, "maxLength": 63},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
    },
}
_CONFIG_MAP = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata"],
    "properties": {
        "apiVersion": {"const": "v1"},
        "kind": {"const": "ConfigMap"},
        "metadata": _METADATA,
        "data": {**_STRING_MAP, "propertyNames": {"pattern": r"^[-._a-zA-Z0-9]+$"}},
        "binaryData": _STRING_MAP,
        "immutable": {"type": "boolean"},
    },
}


@dataclass(frozen=True)
class ManifestProblem:
    """One problem: FILE: document N (Kind/name): field.path: message."""

    file: str
    document: int  # 1-based, in file order
    object: str  # Kind/name, or what is known of it
    field: str
    message: str

    def __str__(self) -> str:
        if not self.document:  # the file as a whole: unreadable, not YAML, empty
            return f"{self.file}: {self.message}"
        where = f"{self.file}: document {self.document} ({self.object})"
        return (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )


@dataclass(frozen=True)
class FileReport:
    file: str
    checked: list[str]  # Kind/name of each document checked
    skipped: list[str]  # Kind/name of documents no schema here covers
    problems: list[ManifestProblem]


def crd_dir() -> Path:
    """The CRDs: packaged in the wheel, or k8s/crds in a source checkout."""
    packaged = resources.files("runner").joinpath("k8s", "crds")
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "k8s" / "crds"


def _strict(node: Any) -> None:
    if isinstance(node, dict):
        keeps_unknown = node.get("x-kubernetes-preserve-unknown-fields")
        if "properties" in node and "additionalProperties" not in node and not keeps_unknown:
            node["additionalProperties"] = False
        for value in node.values():
            _strict(value)
    elif isinstance(node, list):
        for value in node:
            _strict(value)


@cache
def _validator(kind: str) -> jsonschema.Draft7Validator:
    if kind == "ConfigMap":
        return jsonschema.Draft7Validator(_CONFIG_MAP)
    text = (crd_dir() / CRD_FILES[kind]).read_text()
    crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta2")
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
    _strict(schema)
    schema["properties"]["apiVersion"] = {"const": GROUP_VERSION}
    schema["properties"]["kind"] = {"const": kind}
    schema["properties"]["metadata"] = _METADATA
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
    return jsonschema.Draft7Validator(schema)


def _describe(value: Any) -> str:
    kinds = {bool: "boolean", int: "integer", float: "number", str: "string"}
    kinds.update({list: "array", dict: "object", type(None): "null"})
    kind = kinds.get(type(value), type(value).__name__)
    return kind if isinstance(value, (list, dict)) else f"{kind} {value!r}"


def _messages(err: jsonschema.ValidationError) -> list[tuple[str, str]]:
    path = tuple(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = err.schema.get("properties", {}) if isinstance(err.schema, dict) else {}
        extra = sorted(set(err.instance) - set(allowed))
        return [(dotted((*path, name)), "unknown field") for name in extra]
    if err.validator == "required":
        missing = [m for m in err.validator_value if m not in err.instance]  # type: ignore[union-attr, operator]
        return [(dotted((*path, name)), "required field missing") for name in missing]
    if err.validator == "type":
        expected = err.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        return [(dotted(path), f"expected {expected}, got {_describe(err.instance)}")]
    return [(dotted(path), err.message)]


def check_document(doc: Any, file: str, number: int) -> tuple[str, list[ManifestProblem]] | None:
    """Problems of one document, or None when no schema here covers its kind."""
    if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
        message = "not a Kubernetes object (a mapping with apiVersion and kind)"
        if isinstance(doc, dict) and "sources" in doc and "target" in doc:
            message = (
                "a pipeline spec, not a manifest: check it with `runner validate`, or render "
                "it first (`runner render SPEC --image IMAGE`)"
            )
        return "?", [ManifestProblem(file, number, "?", "", message)]
    kind, api = doc["kind"], doc["apiVersion"]
    name = (doc.get("metadata") or {}).get("name", "?")
    shown = f"{kind}/{name}"
    known = kind == "ConfigMap" and api == "v1"
    if str(api).startswith("sparkoperator.k8s.io/"):
        if kind not in CRD_FILES:
            known_kinds = ", ".join(CRD_FILES)
            message = f"unknown kind {kind!r} of {api} (known: {known_kinds})"
            return shown, [ManifestProblem(file, number, shown, "kind", message)]
        known = True
    if not known:
        return None
    problems = [
        ManifestProblem(file, number, shown, field, message)
        for err in _validator(kind).iter_errors(doc)
        for field, message in _messages(err)
    ]
    problems += [  # strings the schema takes and the operator or Spark would not
        ManifestProblem(file, number, shown, dotted(path), message)
        for path, message in value_problems(kind, doc)
    ]
    return shown, sorted(set(problems), key=lambda p: (p.field, p.message))


def check_file(path: str | Path) -> FileReport:
    """Check every document of one manifest file."""
    file = str(path)
    try:
        docs = list(yaml.safe_load_all(Path(path).read_text(encoding="utf-8")))
    except OSError as exc:
        return FileReport(file, [], [], [ManifestProblem(file, 0, "?", "", exc.strerror or "")])
    except yaml.YAMLError as exc:
        problem = ManifestProblem(file, 0, "?", "", f"not valid YAML: {exc}")
        return FileReport(file, [], [], [problem])
    if all(doc is None for doc in docs):
        message = "nothing to check: the file holds no YAML document (it is empty or only comments)"
        return FileReport(file, [], [], [ManifestProblem(file, 0, "?", "", message)])
    checked: list[str] = []
    skipped: list[str] = []
    problems: list[ManifestProblem] = []
    for number, doc in enumerate((d for d in docs if d is not None), start=1):
        result = check_document(doc, file, number)
        if result is None:
            skipped.append(f"{doc['kind']}/{(doc.get('metadata') or {}).get('name', '?')}")
            continue
        checked.append(result[0])
        problems += result[1]
    return FileReport(file, checked, skipped, problems)
