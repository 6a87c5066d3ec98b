"""Writer schemas from a Confluent schema registry, by id, fetched once per process.

Values in Confluent's wire format name their writer schema by id; `from_avro` needs the
schema itself. The registry's REST API answers `GET /schemas/ids/{id}` with it. Ids never
change meaning, so each is fetched once and kept for the process (every round of a
continuous run). Credentials may sit in the URL (https://user:pass@host, from `${env:...}`
references): they go into a basic-auth header and never into a message.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

from runner.errors import UserError
from runner.spec.urls import url_endpoint

TIMEOUT_S = 10
_FETCHED: dict[tuple[str, int], str] = {}  # (registry URL, id) -> the schema's JSON text


@dataclass(frozen=True)
class Registry:
    base: str  # the URL without credentials, for requests and messages
    source: str
    authorization: str | None = None

    def schemas(self, ids: Sequence[int], topic: str | None) -> dict[int, str]:
        """The Avro schemas (JSON text) of the `ids` the registry knows; with no ids (nothing
        framed was read), the latest of the topic's value subject (`<topic>-value`), for the
        view's columns."""
        found: dict[int, str] = {}
        for schema_id in ids:
            text = _FETCHED.get((self.base, schema_id))
            if text is None:
                text = self._get(f"/schemas/ids/{schema_id}")
                if text is not None:
                    _FETCHED[(self.base, schema_id)] = text
            if text is not None:
                found[schema_id] = text
        if not ids and topic:
            latest = self._get(f"/subjects/{topic}-value/versions/latest")
            if latest is not None:
                found[0] = latest
        return found

    def nothing_to_read_with(self, ids: Sequence[int]) -> str:
        if ids:
            shown = ", ".join(str(i) for i in ids)
            return (
                f"source '{self.source}': the schema registry at {self.base} knows none of the "
                f"schema ids the records name ({shown}); check kafka.schema_registry_url"
            )
        return (
            f"source '{self.source}': no record in Confluent's wire format was read, and the "
            f"schema registry at {self.base} has no latest value schema for the topic, so the "
            "source's columns are unknown"
        )

    def _get(self, path: str) -> str | None:
        """The `schema` of the registry's answer; None when it has none (404)."""
        request = urllib.request.Request(
            self.base.rstrip("/") + path,
            headers={"Accept": "application/vnd.schemaregistry.v1+json, application/json"},
        )
        if self.authorization:
            request.add_header("Authorization", self.authorization)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise UserError(
                f"source '{self.source}': the schema registry at {self.base} answered "
                f"{exc.code} {exc.reason} to GET {path}"
            ) from None
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise UserError(
                f"source '{self.source}': the schema registry at {self.base} cannot be read "
                f"({reason}); check kafka.schema_registry_url and that it is reachable from here"
            ) from None
        if body.get("schemaType", "AVRO") != "AVRO":
            raise UserError(
                f"source '{self.source}': schema {path} at {self.base} is "
                f"{body['schemaType']}, not Avro; value_format avro reads Avro values only"
            )
        return str(body["schema"])


def registry_for(url: str, source: str) -> Registry:
    """The registry at `url` (`${env:NAME}` references resolved), credentials taken out."""
    registry = url_endpoint(url, f"source '{source}' kafka.schema_registry_url")
    return Registry(registry.url, source, registry.authorization)
