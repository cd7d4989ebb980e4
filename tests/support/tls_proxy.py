"""A TLS front for the embedded broker: what a TLS listener of a real Kafka cluster does.

tansu 0.6 as shipped cannot serve TLS here (``--cert`` and ``--key`` are mutually exclusive
on its command line, and a ``tls://`` listener never answers a ClientHello), so the tests put
this proxy in front of a plaintext tansu whose advertised listener is the proxy: every
connection a Kafka client opens — bootstrap and broker — goes through a real TLS handshake
(server certificate verification, host name check, and optionally a client certificate)
and then reaches the real broker. Standard library only.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from pathlib import Path


class TlsProxy:
    """Accept TLS on ``port``, forward the plaintext to ``127.0.0.1:target``."""

    def __init__(
        self,
        target: int,
        *,
        cert: Path,
        key: Path,
        client_ca: Path | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.target = target
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(cert), str(key))
        if client_ca is not None:  # mutual TLS: a client certificate signed by this CA
            self.context.verify_mode = ssl.CERT_REQUIRED
            self.context.load_verify_locations(str(client_ca))
        self.listener = socket.create_server((host, 0))
        self.port = self.listener.getsockname()[1]
        self.handshakes = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def start(self) -> TlsProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self.listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            raw.settimeout(10)
            tls = self.context.wrap_socket(raw, server_side=True)
            tls.settimeout(None)
        except (ssl.SSLError, OSError):
            self.failures += 1
            with contextlib.suppress(OSError):
                raw.close()
            return
        self.handshakes += 1
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            upstream.settimeout(None)
        except OSError:
            tls.close()
            return
        threading.Thread(target=_pump, args=(tls, upstream), daemon=True).start()
        _pump(upstream, tls)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.close()
