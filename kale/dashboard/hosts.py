"""Which ``Host`` headers the dashboard answers: a defence against DNS rebinding.

Why this module exists: the dashboard has no authentication and binds 127.0.0.1. A web page
on any site can still make the browser send requests to 127.0.0.1 under the attacker's own
domain name (DNS rebinding: the name first resolves to the attacker, then to 127.0.0.1),
and the browser's same-origin rule then lets that page read the answers. What gives it away
is the ``Host`` header, which carries the attacker's name. So only the loopback names, the
literal address the server was bound to, and names the operator configured
(``kale dashboard --allow-host``) are answered; any other host gets ``421 Misdirected
Request`` before a route runs.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

Scope = dict[str, Any]
Channel = Callable[..., Awaitable[Any]]
ASGIApp = Callable[[Scope, Channel, Channel], Awaitable[None]]


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without the port and IPv6 brackets, lower case."""
    value = header.strip().lower()
    if value.startswith("["):  # [::1]:8080
        return value[1 : value.find("]")] if "]" in value else value
    if value.count(":") == 1:  # name:port (a bare IPv6 address has several colons)
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def allowed_hosts(bound: str | None = None, extra: Iterable[str] = ()) -> frozenset[str]:
    """Loopback names, the bound address when it is a specific literal IP, and ``extra``."""
    names = set(LOOPBACK) | {host_name(n) for n in extra if n.strip()}
    if bound:
        try:
            ip = ipaddress.ip_address(host_name(bound))
        except ValueError:
            names.add(host_name(bound))  # bound by name: that name is the operator's
        else:
            if not ip.is_unspecified:  # 0.0.0.0 means "any": no name follows from it
                names.add(str(ip))
    return frozenset(names)


class HostCheck:
    """ASGI middleware: 421 for HTTP requests whose Host is not in ``allowed``."""

    def __init__(self, app: ASGIApp, *, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope.get("type") in ("http", "websocket"):
            headers = dict(scope.get("headers") or [])
            host = host_name(headers.get(b"host", b"").decode("latin-1"))
            if host not in self.allowed:
                body = b"misdirected request: this dashboard does not answer for that host\n"
                await send(
                    {
                        "type": "http.response.start",
                        "status": 421,
                        "headers": [
                            (b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
