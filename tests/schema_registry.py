"""A minimal Confluent Schema Registry on 127.0.0.1, for the Kafka source's Avro tests.

It answers what confluent_kafka's `AvroSerializer` (with auto.register.schemas) and a reader
of Confluent's wire format call, with the real registry's JSON shapes:

- `POST /subjects/{subject}/versions` {"schema": ...} -> {"id": n}: the same schema text gets
  the same id under every subject, as in the real registry;
- `GET /schemas/ids/{id}` -> {"schema": ...}; an unknown id is 404
  {"error_code": 40403, "message": ...};
- `GET /associations/resources/{namespace}/{topic}` -> []: confluent-kafka 2.16's serializers
  ask which subject a topic is associated with before falling back to "<topic>-value" (an
  older registry's 404 means the same to them).

Anything else is 404 {"error_code": 404, ...}. Only Avro: another schemaType is refused (422).
`requests` counts each "METHOD path" (no query string), so a test can check that a reader
fetches each id once. `register()` adds a schema without a request being counted.

`schema_registry` (function fixture) starts one on a free port and stops it afterwards.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import pytest

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
SCHEMA_BY_ID = re.compile(r"/schemas/ids/(\d+)")
ASSOCIATIONS = re.compile(r"/associations/resources/[^/]+/[^/]+")
SUBJECT_VERSIONS = re.compile(r"/subjects/([^/]+)/versions")


@dataclass
class SchemaRegistry:
    """The registry's state and its address; `url` is the base URL a client is given."""

    url: str = ""
    requests: Counter[str] = field(default_factory=Counter)
    schemas: list[str] = field(default_factory=list)  # schema id n is schemas[n - 1]
    subjects: dict[str, list[int]] = field(default_factory=dict)  # subject -> ids by version
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _client: SchemaRegistryClient | None = field(default=None, repr=False, compare=False)

    def register(self, subject: str, schema_str: str) -> int:
        """The schema's id (a new one for a schema text not seen before), under `subject`."""
        with self._lock:
            if schema_str in self.schemas:
                schema_id = self.schemas.index(schema_str) + 1
            else:
                self.schemas.append(schema_str)
                schema_id = len(self.schemas)
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id

    def _record(self, request: str) -> None:
        with self._lock:
            self.requests[request] += 1

    def schema(self, schema_id: int) -> str | None:
        with self._lock:
            return self.schemas[schema_id - 1] if 0 < schema_id <= len(self.schemas) else None

    def serializer(self, schema_str: str) -> AvroSerializer:
        """An AvroSerializer writing Confluent's wire format, registering `schema_str` under
        "<topic>-value" on first use: `serializer(record, SerializationContext(topic,
        MessageField.VALUE))` -> bytes (magic byte 0, 4-byte big-endian id, Avro binary)."""
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer

        if self._client is None:
            self._client = SchemaRegistryClient({"url": self.url})
        return AvroSerializer(self._client, schema_str, conf={"auto.register.schemas": True})


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self._count()
        match = SCHEMA_BY_ID.fullmatch(path)
        text = self.server.registry.schema(int(match[1])) if match else None
        if ASSOCIATIONS.fullmatch(path):
            self._reply(200, [])
        elif match is None:
            self._not_found()
        elif text is None:
            self._reply(404, {"error_code": 40403, "message": f"Schema {match[1]} not found"})
        else:
            self._reply(200, {"schema": text})

    def do_POST(self) -> None:
        path = self._count()
        match = SUBJECT_VERSIONS.fullmatch(path)
        if match is None:
            self._not_found()
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length))
            schema_str = body["schema"]
        except (ValueError, KeyError, TypeError):
            self._reply(422, {"error_code": 42201, "message": "Invalid schema: no `schema`"})
            return
        if body.get("schemaType", "AVRO") != "AVRO" or body.get("references"):
            message = "this test registry serves Avro schemas without references only"
            self._reply(422, {"error_code": 42201, "message": message})
            return
        self._reply(200, {"id": self.server.registry.register(unquote(match[1]), schema_str)})

    def _count(self) -> str:
        path = urlsplit(self.path).path
        self.server.registry._record(f"{self.command} {path}")
        return path

    def _not_found(self) -> None:
        self._reply(404, {"error_code": 404, "message": "HTTP 404 Not Found"})

    def _reply(self, status: int, payload: dict[str, Any] | list[Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: `requests` is the record a test reads."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, registry: SchemaRegistry) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.registry = registry


@pytest.fixture
def schema_registry() -> Iterator[SchemaRegistry]:
    """A running registry with no schemas, on a free port of 127.0.0.1."""
    pytest.importorskip(
        "confluent_kafka.schema_registry.avro",
        reason="needs confluent-kafka[avro,schemaregistry] (the dev extra)",
    )
    registry = SchemaRegistry()
    server = _Server(registry)
    registry.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="schema-registry", daemon=True)
    thread.start()
    try:
        yield registry
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
