"""``/metrics``, ``/healthz`` and ``/readyz`` on a small HTTP server: what both daemons serve.

The controller and ``kale scheduler`` each answer their Deployment's probes on the port that
Prometheus scrapes: ``/healthz`` (the loop is alive: it ran an iteration recently) and
``/readyz`` (it has done its first round, as leader or standby). The standard library's
threading server is enough for a scrape every few seconds and a probe; it needs no extra
dependency in the core install.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client.exposition import CONTENT_TYPE_LATEST


class Exposition(Protocol):
    """Anything that renders a Prometheus text exposition (a daemon's metrics)."""

    def render(self) -> bytes: ...


class Health:
    """What the probes report; the runner updates it."""

    def __init__(self, *, stale_after_s: float, clock: Callable[[], float] = time.time) -> None:
        self.stale_after_s = stale_after_s
        self.clock = clock
        self.last_beat: float | None = None
        self.ready = False

    def beat(self) -> None:
        self.last_beat = self.clock()
        self.ready = True

    def alive(self) -> bool:
        return self.last_beat is None or self.clock() - self.last_beat < self.stale_after_s


class MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on a background thread."""

    def __init__(
        self,
        metrics: Exposition,
        health: Health | None = None,
        *,
        address: str = "0.0.0.0",
        port: int = 9100,
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer._serve(self)

        self.metrics = metrics
        self.health = health
        self.server = ThreadingHTTPServer((address, port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(
            target=self.server.serve_forever,
            name="kale-metrics",
            kwargs={"poll_interval": 0.2},
            daemon=True,
        )

    def _serve(self, req: BaseHTTPRequestHandler) -> None:
        path = req.path.split("?")[0]
        ctype = "text/plain; charset=utf-8"
        if path == "/metrics":
            code, body, ctype = 200, self.metrics.render(), CONTENT_TYPE_LATEST
        elif path == "/healthz":
            ok = self.health is None or self.health.alive()
            code, body = (200, b"ok\n") if ok else (503, b"loop stalled\n")
        elif path == "/readyz":
            ok = self.health is None or self.health.ready
            code, body = (200, b"ready\n") if ok else (503, b"starting\n")
        else:
            code, body = 404, b"not found\n"
        req.send_response(code)
        req.send_header("Content-Type", ctype)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)

    def start(self) -> MetricsServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
