"""The spec reference in Markdown, generated from the JSON Schema so the two cannot drift."""

from __future__ import annotations

import json
from typing import Any

from runner.spec.schema_check import schema_path

HEADER = """\
# Pipeline spec reference

Generated from `schemas/pipeline.schema.json` by `runner schema --markdown`; do not edit by
hand (a test compares the two). Editors that speak the YAML language server validate as you
type with this first line in a spec:
`# yaml-language-server: $schema=<path to>/schemas/pipeline.schema.json`.
"""


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        ref = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            ref = ref[part]
        node = {**ref, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _type(node: dict[str, Any]) -> str:
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    kind = node.get("type", "any")
    kinds = kind if isinstance(kind, list) else [kind]
    if "array" in kinds and "items" in node:
        kinds = [k if k != "array" else "list" for k in kinds]
    text = " or ".join(kinds)
    limits = []
    if "minimum" in node:
        limits.append(f">= {node['minimum']}")
    if "maximum" in node:
        limits.append(f"<= {node['maximum']}")
    return text + (f" ({', '.join(limits)})" if limits else "")


def _rows(node: dict[str, Any], root: dict[str, Any], prefix: str, out: list[str]) -> None:
    required = set(node.get("required", []))
    for name, child in node.get("properties", {}).items():
        child = _resolve(child, root)
        path = f"{prefix}{name}"
        items = _resolve(child.get("items", {}), root) if child.get("type") == "array" else {}
        shown = path + ("[]" if items.get("type") == "object" else "")
        default = f"`{json.dumps(child['default'])}`" if "default" in child else ""
        description = child.get("description", "").replace("|", "\\|")
        out.append(
            f"| `{shown}` | {_type(child)} | {'yes' if name in required else ''} | "
            f"{default} | {description} |"
        )
        if child.get("type") == "object" and "properties" in child:
            _rows(child, root, path + ".", out)
        if items.get("type") == "object":
            _rows(items, root, shown + ".", out)


def spec_reference() -> str:
    root = json.loads(schema_path().read_text())
    lines = [
        HEADER,
        root.get("description", ""),
        "",
        "| field | type | required | default | meaning |",
        "|---|---|---|---|---|",
    ]
    _rows(root, root, "", lines)
    return "\n".join(lines) + "\n"
