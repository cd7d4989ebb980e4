"""Serve the dashboard from a background thread, and stop it for sure.

Why this module exists: ``kale demo`` and the tests run the dashboard next to other work and
must leave no listening port behind, even on Ctrl-C. :class:`DashboardServer` binds first (so
a busy port is an error at once, and port 0 picks a free one that :attr:`port` reports), runs
uvicorn on a daemon thread, and :meth:`stop` makes it exit and waits for the socket to close.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from common.errors import UserError

#: How long :meth:`DashboardServer.start` waits for uvicorn to serve.
START_TIMEOUT_S = 20.0


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one); UserError when taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserError(f"--port: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


class DashboardServer:
    """uvicorn serving ``app`` on ``host:port`` in a daemon thread."""

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        self.host = host
        self.sock = bind(host, port)
        self.port: int = int(self.sock.getsockname()[1])
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2
        )
        self.server = uvicorn.Server(config)  # off the main thread: no signal handlers
        self.thread = threading.Thread(target=self._serve, name="kale-dashboard", daemon=True)
        self.error: BaseException | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def _serve(self) -> None:
        try:
            self.server.run(sockets=[self.sock])
        except BaseException as exc:  # reported by start()/stop()
            self.error = exc

    def start(self) -> DashboardServer:
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if self.error is not None or not self.thread.is_alive():
                self.sock.close()
                raise RuntimeError(f"the dashboard did not start: {self.error}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the dashboard did not start within {START_TIMEOUT_S:g}s")
            time.sleep(0.02)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask uvicorn to exit, wait for it, and close the socket whatever happened."""
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(timeout_s)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(2.0)
        self.sock.close()

    def __enter__(self) -> DashboardServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
