"""Which ``Host`` headers the dashboard answers: a defence against DNS rebinding.

Why this module exists: the dashboard has no authentication and binds 127.0.0.1. A web page
on any site can still make the browser send requests to 127.0.0.1 under the attacker's own
domain name (DNS rebinding: the name first resolves to the attacker, then to 127.0.0.1),
and the browser's same-origin rule then lets that page read the answers. What gives it away
is the ``Host`` header, which carries the attacker's name. So only the loopback names, the
literal address the server was bound to, and names the operator configured
(``kale dashboard --allow-host``) are answered; any other host gets ``421 Misdirected
Request`` before a route runs.

The check itself is Starlette's ``TrustedHostMiddleware``; this module says which names it
allows and answers a refusal with 421 rather than Starlette's ``400 Invalid host header``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

MISDIRECTED = b"misdirected request: this dashboard does not answer for that host\n"
_ALLOWED = "kale.host_allowed"
"""Set in a request's scope once Starlette let it through (its answers pass untouched)."""


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


class HostCheck(TrustedHostMiddleware):
    """Starlette's Host check over ``allowed`` (names as :func:`allowed_hosts` gives them).

    A refused request gets ``421 Misdirected Request`` (RFC 9110: this server does not
    answer for that name) with :data:`MISDIRECTED`, not Starlette's 400; a name is never
    a wildcard and never redirects to its ``www.`` form.
    """

    def __init__(self, app: ASGIApp, *, allowed: frozenset[str]) -> None:
        async def allowed_app(scope: Scope, receive: Receive, send: Send) -> None:
            scope[_ALLOWED] = True
            await app(scope, receive, send)

        super().__init__(allowed_app, allowed_hosts=_patterns(allowed), www_redirect=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def answer(message: Message) -> None:
            if scope.get(_ALLOWED):
                await send(message)
            elif message["type"] == "http.response.start":
                headers = [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(MISDIRECTED)).encode()),
                ]
                await send({"type": "http.response.start", "status": 421, "headers": headers})
            elif message["type"] == "http.response.body":
                await send({"type": "http.response.body", "body": MISDIRECTED})
            else:
                await send(message)

        await super().__call__(scope, receive, answer)


def _patterns(allowed: frozenset[str]) -> list[str]:
    """``allowed`` as Starlette compares a Host: IPv6 in brackets, a name also with the
    trailing dot of a fully qualified name; a name with ``*`` is left out (Starlette would
    read it as a wildcard, and no DNS name has one)."""
    out: set[str] = set()
    for name in allowed:
        if "*" in name:
            continue
        if ":" in name:
            out.add(f"[{name}]")
        else:
            out |= {name, f"{name}."}
    return sorted(out)
