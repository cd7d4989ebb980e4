"""How Kale's Kafka clients authenticate and encrypt: SASL (PLAIN, SCRAM-SHA-256/512) and TLS.

Why a value of its own: the meter, the backfill and the trainer all open Kafka clients for a
job, and all must speak to that job's brokers the same way. A :class:`KafkaSecurity` holds the
material itself (PEM bytes, user name, password: read from a Secret in cluster mode, from
files or environment variables locally, see :mod:`autoscaler.kafka.credentials`), and
:meth:`KafkaSecurity.client_config` turns it into kafka-python's settings. TLS material stays
in memory: the CA goes into an ``ssl.SSLContext`` directly; a client certificate and key,
which ``ssl`` only loads from files, are written to a private temporary file, loaded, and
removed at once. Nothing here imports kafka.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass, field
from typing import Any, Literal

Mechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@dataclass(frozen=True)
class KafkaSecurity:
    """One job's Kafka credentials and TLS settings (picklable: the trainer's children get
    it)."""

    tls: bool = False
    """Encrypt (``SSL`` / ``SASL_SSL``)."""
    ca_pem: bytes | None = None
    """CA bundle the brokers' certificates must chain to (None: the system's CAs)."""
    cert_pem: bytes | None = None
    """Client certificate (mutual TLS), with :attr:`key_pem`."""
    key_pem: bytes | None = field(default=None, repr=False)
    check_hostname: bool = True
    """Verify that a broker's certificate names the host it was reached at."""
    sasl_mechanism: Mechanism | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def protocol(self) -> str:
        """kafka-python's ``security_protocol``."""
        if self.sasl_mechanism is None:
            return "SSL" if self.tls else "PLAINTEXT"
        return "SASL_SSL" if self.tls else "SASL_PLAINTEXT"

    def ssl_context(self) -> ssl.SSLContext:
        """A verifying client context with this CA and client certificate."""
        ctx = ssl.create_default_context(
            cadata=self.ca_pem.decode("ascii") if self.ca_pem else None
        )
        if not self.ca_pem:
            ctx.load_default_certs()
        ctx.check_hostname = self.check_hostname
        if self.cert_pem is not None and self.key_pem is not None:
            _load_client_pair(ctx, self.cert_pem, self.key_pem)
        return ctx

    def client_config(self) -> dict[str, Any]:
        """The settings every kafka-python client of this job gets."""
        out: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            out["ssl_context"] = self.ssl_context()
            out["ssl_check_hostname"] = self.check_hostname
        if self.sasl_mechanism is not None:
            out["sasl_mechanism"] = self.sasl_mechanism
            out["sasl_plain_username"] = self.username
            out["sasl_plain_password"] = self.password
        return out

    def describe(self) -> str:
        """For logs and messages: the protocol and mechanism, never a secret."""
        return self.protocol + (f" ({self.sasl_mechanism})" if self.sasl_mechanism else "")


PLAINTEXT = KafkaSecurity()


def client_settings(security: KafkaSecurity | None) -> dict[str, Any]:
    """``security.client_config()``, or nothing for a plaintext cluster."""
    return {} if security is None else security.client_config()


def _load_client_pair(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    fd, path = tempfile.mkstemp(prefix="kale-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as fh:  # mkstemp: mode 0600, this user only
            fh.write(cert_pem.rstrip(b"\n") + b"\n" + key_pem)
        ctx.load_cert_chain(path)
    finally:
        os.unlink(path)
