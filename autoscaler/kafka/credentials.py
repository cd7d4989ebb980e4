"""A job's Kafka credentials: from its Secret references to a :class:`KafkaSecurity`.

Why this module exists: ``spec.source.kafka.sasl`` and ``.tls`` name Secrets in the job's
namespace, and three readers resolve them the same way — the cluster controller (the API
server, ``get`` on that Secret), the controller in local mode and ``kale plan``/``kale train``
(environment variables or files laid out as a mounted Secret volume, so the same job file
works in a pod that mounts the Secret). A missing Secret or key is the job's problem, said in
one line naming the field; the values never appear in a message or a log.

Local lookup of key ``KEY`` of Secret ``NAME``, first hit wins:

1. the environment variable ``KALE_SECRET_<NAME>_<KEY>`` (upper case, every character that is
   not a letter or digit as ``_``: ``kafka-creds``/``password`` →
   ``KALE_SECRET_KAFKA_CREDS_PASSWORD``);
2. the file ``<secrets dir>/<NAME>/<KEY>`` (a Secret mounted at ``<secrets dir>/<NAME>``).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from autoscaler.kafka.security import KafkaSecurity

#: Where local Secrets are read from unless configured (``$KALE_SECRETS_DIR`` overrides).
DEFAULT_SECRETS_DIR = Path("/etc/kale/secrets")
#: A PEM bundle or a password is small; a Secret holds at most 1 MiB.
MAX_VALUE_BYTES = 1 << 20


class SecretMissing(ValueError):
    """The Secret, or the key in it, does not exist."""


class SecretData(Protocol):
    def get(self, key: str) -> bytes | None: ...


SecretReader = Callable[[str, str], SecretData]
"""``(namespace, name) -> SecretData``; raises :class:`SecretMissing` (a ``ValueError``)."""


def env_name(name: str, key: str) -> str:
    return "KALE_SECRET_" + re.sub(r"[^A-Z0-9]", "_", f"{name}_{key}".upper())


class LocalSecret:
    def __init__(self, name: str, directory: Path, env: Mapping[str, str]) -> None:
        self.name, self.directory, self.env = name, directory, env

    def get(self, key: str) -> bytes | None:
        value = self.env.get(env_name(self.name, key))
        if value is not None:
            return value.encode("utf-8")
        path = self.directory / self.name / key
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_VALUE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SecretMissing(f"cannot read {path}: {exc.strerror or exc}") from None
        if len(data) > MAX_VALUE_BYTES:
            raise SecretMissing(f"{path} is larger than {MAX_VALUE_BYTES} bytes")
        return data


class LocalSecrets:
    """Secrets from the environment and a directory (local mode, ``kale plan``, the trainer)."""

    def __init__(
        self, directory: str | Path | None = None, env: Mapping[str, str] | None = None
    ) -> None:
        env = os.environ if env is None else env
        self.directory = Path(directory or env.get("KALE_SECRETS_DIR") or DEFAULT_SECRETS_DIR)
        self.env = env

    def read(self, namespace: str, name: str) -> LocalSecret:
        return LocalSecret(name, self.directory, self.env)


def uses_secrets(kafka: Any) -> bool:
    """Whether ``spec.source.kafka`` names any Secret."""
    return kafka.sasl is not None or (kafka.tls is not None and kafka.tls.secret_ref is not None)


def security_for(kafka: Any, namespace: str, read: SecretReader) -> KafkaSecurity | None:
    """The client security of ``spec.source.kafka`` (None: plaintext, no Secret)."""
    if kafka.sasl is None and kafka.tls is None:
        return None
    values: dict[str, Any] = {}
    if kafka.tls is not None:
        values.update(tls=True, check_hostname=kafka.tls.check_hostname)
        ref = kafka.tls.secret_ref
        if ref is not None:
            where = "spec.source.kafka.tls.secretRef"
            secret = _read(read, namespace, ref.name, where)
            values["ca_pem"] = _value(secret, namespace, ref.name, ref.ca_key, where)
            if ref.cert_key is not None and ref.key_key is not None:
                values["cert_pem"] = _value(secret, namespace, ref.name, ref.cert_key, where)
                values["key_pem"] = _value(secret, namespace, ref.name, ref.key_key, where)
    if kafka.sasl is not None:
        ref = kafka.sasl.secret_ref
        where = "spec.source.kafka.sasl.secretRef"
        secret = _read(read, namespace, ref.name, where)
        user = _value(secret, namespace, ref.name, ref.username_key, where)
        password = _value(secret, namespace, ref.name, ref.password_key, where)
        values.update(
            sasl_mechanism=kafka.sasl.mechanism,
            username=_text(user, where, ref.username_key),
            password=_text(password, where, ref.password_key),
        )
    return KafkaSecurity(**values)


def fingerprint(security: KafkaSecurity | None) -> str:
    """Changes when any credential changes (for deciding to reconnect); reveals nothing."""
    if security is None:
        return "plaintext"
    h = hashlib.sha256(repr(security).encode())
    for part in (security.key_pem, security.password):
        h.update(b"\0" + (part.encode() if isinstance(part, str) else part or b""))
    return h.hexdigest()[:16]


def _read(read: SecretReader, namespace: str, name: str, where: str) -> SecretData:
    try:
        return read(namespace, name)
    except ValueError as exc:  # the reader's "missing" (a SecretMissing of its own)
        raise SecretMissing(f"{where}: {exc}") from None


def _value(secret: SecretData, namespace: str, name: str, key: str, where: str) -> bytes:
    value = secret.get(key)
    if value is None:
        raise SecretMissing(f"{where}: Secret {namespace}/{name} has no key {key!r}")
    return value


def _text(value: bytes, where: str, key: str) -> str:
    try:
        return value.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise SecretMissing(f"{where}: key {key!r} is not UTF-8 text") from None
