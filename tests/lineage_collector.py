"""An OpenLineage collector for the tests: an HTTP endpoint on 127.0.0.1 that keeps the
events it is sent."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Collector:
    """An OpenLineage HTTP endpoint on 127.0.0.1 that keeps what it is sent; with
    `authorization`, only requests that carry that Authorization header (401 otherwise)."""

    def __init__(self, authorization: str | None = None) -> None:
        self.bodies: list[bytes] = []
        self.paths: list[str] = []
        self.refused = 0
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if authorization and self.headers.get("Authorization") != authorization:
                    collector.refused += 1
                    self.send_response(401)
                    self.end_headers()
                    return
                collector.bodies.append(body)
                collector.paths.append(self.path)
                self.send_response(201)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def events(self) -> list[dict[str, Any]]:
        return [json.loads(body) for body in self.bodies]
