"""The URLs the runner calls (a Pushgateway, an OpenLineage endpoint, a schema registry, a
database), their `${env:NAME}` references resolved and their credentials taken out.

    endpoint = url_endpoint("http://ops:${env:PGW_PW}@pgw:9091", "metrics.pushgateway")
    endpoint.url            # http://pgw:9091: what is requested, and what messages show
    endpoint.authorization  # "Basic b3BzOi4uLg==": the header an HTTP server expects

A URL is split as written, before any reference is resolved: a password whose value holds
`/`, `@` or `:` stays the password. The userinfo (`user:password@`) is percent-decoded as
RFC 3986 writes it; the values of references are taken as they are. Each caller hands the
credentials on as its protocol expects (an Authorization header for HTTP, the `user` and
`password` properties for JDBC), so no client ever takes `user:password@host` for a host
name, and the URL that is shown never holds them.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote

from runner.spec.secrets import ENV_REF, resolve

# scheme:// (JDBC's jdbc:vendor:// too), then the authority's userinfo: everything up to the
# last @ before the path, query, fragment or a JDBC ;parameter.
_USERINFO = re.compile(
    r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*(?::[A-Za-z][A-Za-z0-9+.\-]*)*://)"
    r"(?:(?P<userinfo>[^/?#;]*)@)?(?P<rest>.*)$",
    re.DOTALL,
)
# user[:password], where a `${env:NAME}` in the user is one piece (its colon splits nothing).
_USER_PASSWORD = re.compile(rf"^(?P<user>(?:{ENV_REF.pattern}|[^:])*)(?::(?P<password>.*))?$")


@dataclass(frozen=True)
class Endpoint:
    """A URL to call: `url` resolved and without credentials, the credentials apart."""

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def authorization(self) -> str | None:
        """HTTP basic authentication's header value; None without a user."""
        if self.user is None:
            return None
        pair = f"{self.user}:{self.password or ''}".encode()
        return "Basic " + base64.b64encode(pair).decode()


def url_endpoint(url: str, where: str, environ: Mapping[str, str] | None = None) -> Endpoint:
    """The endpoint `url` names: every `${env:NAME}` reference resolved (an unset one is a
    MissingEnvError naming `where`), the userinfo taken out of the URL into `user` and
    `password`. Resolved values are registered for `scrub`, so no message shows them."""
    found = _USERINFO.match(url)
    if found is None or found["userinfo"] is None:
        return Endpoint(str(resolve(url, environ, where)))
    parts = _USER_PASSWORD.match(found["userinfo"])
    assert parts is not None, "the pattern matches any text"
    written = {"url": found["scheme"] + found["rest"], "user": unquote(parts["user"])}
    if parts["password"] is not None:
        written["password"] = unquote(parts["password"])
    resolved: dict[str, str] = resolve(written, environ, where)
    return Endpoint(resolved["url"], resolved["user"], resolved.get("password"))
