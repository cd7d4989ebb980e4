"""Kafka client factories with bounded timeouts, and the typed errors of the Kafka sources.

Why this module exists: kafka-python's defaults wait 30 s to bootstrap, 60 s to block a
send and ~23 s to join a group against tansu. A metric source that hangs that long is
worse than one that says "unavailable" quickly, so every client Kale creates comes from
here, with timeouts short enough for a controller loop and long enough for a loaded
2-core CI machine. Everything under ``autoscaler/kafka/`` that talks to Kafka uses these
factories; nothing outside ``autoscaler/kafka/`` imports ``kafka``.

Errors are sorted the kopf way: :class:`BrokerUnavailable` is *retry* (the broker may come
back; the controller holds the current size), :class:`TopicMissing` is a configuration
problem that retrying will not fix, but it is still a missing metric, never a zero load.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError, TopicAlreadyExistsError
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from autoscaler.kafka.security import KafkaSecurity, client_settings
from common.errors import MetricUnavailable

#: How long a client may try to reach the first broker before giving up.
BOOTSTRAP_TIMEOUT_MS = 5_000
#: Upper bound on one request round trip (metadata, list offsets, fetch, commit).
REQUEST_TIMEOUT_MS = 8_000
#: Group membership settings that make a tansu group join take ~3 s instead of ~23 s
#: (tansu waits session_timeout / 2 before completing a join; see docs/kafka.md).
SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 2_000

T = TypeVar("T")


class DemoteClientNoise(logging.Filter):
    """kafka-python logs at ERROR what is routine for Kale: "Metadata refresh: failed
    Cancelled" when a short-lived client closes, "Connection failed" while a broker restarts.
    Kale reports an unreachable broker itself (``MetricsAvailable=False``, once, with the
    reason), so these records are demoted to DEBUG: shown only when that is enabled."""

    MESSAGES = ("Metadata refresh", "Connection failed")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not isinstance(record.msg, str):
            return True
        if not record.msg.startswith(self.MESSAGES):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


#: The kafka-python loggers the filter sits on (a logger's filters see its own records).
NOISY_LOGGERS = ("kafka.cluster", "kafka.net.manager")


def demote_client_noise() -> None:
    """Install :class:`DemoteClientNoise` once (idempotent; done when this module loads)."""
    for name in NOISY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, DemoteClientNoise) for f in logger.filters):
            logger.addFilter(DemoteClientNoise())


demote_client_noise()


class BrokerUnavailable(MetricUnavailable):
    """Kafka could not be reached, or did not answer, within the bounded timeout."""

    def __init__(self, bootstrap: str, timeout_s: float, reason: str) -> None:
        super().__init__(f"cannot reach Kafka at {bootstrap} within {timeout_s:g}s: {reason}")
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self.reason = reason


class TopicMissing(MetricUnavailable):
    """The topic does not exist on the broker (Kafka answers zeros for it, not an error)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(f"topic {topic} does not exist on {bootstrap}")
        self.bootstrap = bootstrap
        self.topic = topic


def _reason(exc: BaseException) -> str:
    name = type(exc).__name__
    text = str(exc).strip()
    if not text:
        return name
    # kafka-python errors already start with their class name ("NodeNotReadyError: ...").
    return text if text.startswith(name) else f"{name}: {text}"


@contextlib.contextmanager
def translate_errors(bootstrap: str, timeout_s: float | None = None) -> Iterator[None]:
    """Turn kafka-python and socket errors raised inside the block into BrokerUnavailable."""
    limit = timeout_s if timeout_s is not None else REQUEST_TIMEOUT_MS / 1000
    try:
        yield
    except MetricUnavailable:
        raise
    except (KafkaError, OSError) as exc:
        # A broker that went away mid-session shows as "NodeNotReadyError"; if nothing
        # listens any more, say that instead (what an operator can act on).
        refused = _refused(bootstrap) if isinstance(exc, KafkaError) else None
        raise BrokerUnavailable(bootstrap, limit, refused or _reason(exc)) from exc


def _refused(bootstrap: str) -> str | None:
    """Why no bootstrap server accepts a TCP connection, or None if one does.

    kafka-python keeps retrying a refused connection (or an unknown host name) until its
    bootstrap timeout; both are definite answers ("nothing listens there"), so we give them
    at once.
    Anything else (a slow or filtered host) is left to the client's bounded timeout.
    """
    reasons = []
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=2):
                return None
        except ConnectionRefusedError:
            reasons.append(f"connection refused by {server.strip()}")
        except socket.gaierror:
            reasons.append(f"cannot resolve {host or server.strip()}")
        except (OSError, ValueError, OverflowError):
            return None  # not a clear refusal: let the client try, bounded
    return "; ".join(reasons)


def check_reachable(bootstrap: str) -> None:
    """Raise :class:`BrokerUnavailable` at once if no bootstrap server accepts a connection.

    A cheap TCP probe (no Kafka client): callers that would otherwise start slow work in the
    background (the backfill) use it to report the real cause on the tick that asks.
    """
    refused = _refused(bootstrap)
    if refused:
        raise BrokerUnavailable(bootstrap, BOOTSTRAP_TIMEOUT_MS / 1000, refused)


def _make(bootstrap: str, factory: Callable[[], T]) -> T:
    timeout_s = BOOTSTRAP_TIMEOUT_MS / 1000
    refused = _refused(bootstrap)
    if refused:
        raise BrokerUnavailable(bootstrap, timeout_s, refused)
    with translate_errors(bootstrap, timeout_s):
        return factory()


def _common(
    bootstrap: str, client_id: str, security: KafkaSecurity | None = None
) -> dict[str, Any]:
    return {
        "bootstrap_servers": bootstrap,
        "client_id": client_id,
        "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS,
        "request_timeout_ms": REQUEST_TIMEOUT_MS,
        # Do not back off for 30 s between reconnects: a restarted broker should be seen soon.
        "reconnect_backoff_max_ms": 1_000,
        # SASL and TLS of the job's brokers (nothing for a plaintext cluster).
        **client_settings(security),
    }


def admin_client(
    bootstrap: str, *, client_id: str = "kale-admin", security: KafkaSecurity | None = None
) -> KafkaAdminClient:
    """An admin client that fails with BrokerUnavailable within ~5 s if Kafka is down."""
    return _make(bootstrap, lambda: KafkaAdminClient(**_common(bootstrap, client_id, security)))


def producer(
    bootstrap: str,
    *,
    client_id: str = "kale-producer",
    security: KafkaSecurity | None = None,
    **overrides: Any,
) -> KafkaProducer:
    """A throughput-oriented producer: ``acks=1, linger_ms=5`` (~24k small records/s on tansu).

    ``max_block_ms`` bounds how long ``send()`` may block on a full buffer or missing
    metadata, so a dead broker surfaces as an error instead of a hang.
    """
    config: dict[str, Any] = {
        **_common(bootstrap, client_id, security),
        "acks": 1,
        "linger_ms": 5,
        "max_block_ms": 10_000,
        "enable_idempotence": False,
    }
    config.update(overrides)
    return _make(bootstrap, lambda: KafkaProducer(**config))


def consumer(
    bootstrap: str,
    *,
    group: str | None = None,
    client_id: str = "kale-consumer",
    security: KafkaSecurity | None = None,
    **overrides: Any,
) -> KafkaConsumer:
    """A consumer with group settings that join tansu groups in ~3 s; no auto-commit.

    With ``group=None`` the consumer is for ``assign()``-style reads (the meter's probes).
    """
    config: dict[str, Any] = {
        **_common(bootstrap, client_id, security),
        "group_id": group,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "session_timeout_ms": SESSION_TIMEOUT_MS,
        "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
    }
    config.update(overrides)
    return _make(bootstrap, lambda: KafkaConsumer(**config))


def topic_partitions(admin: KafkaAdminClient, bootstrap: str, topic: str) -> int:
    """Partition count of ``topic``; TopicMissing if the broker does not know it."""
    return describe_topic(admin, bootstrap, topic)[0]


def describe_topic(admin: KafkaAdminClient, bootstrap: str, topic: str) -> tuple[int, str | None]:
    """Partition count and topic id (KIP-516; None when the broker sends none) of ``topic``.

    A topic deleted and created again — or lost by an in-memory broker's restart and
    re-created — keeps its name but gets a new id: its offsets start over.
    """
    with translate_errors(bootstrap):
        described = admin.describe_topics([topic])
    for entry in described:
        if entry.get("name") == topic and entry.get("error_code", 0) == 0:
            count = len(entry.get("partitions") or [])
            if count > 0:
                topic_id = entry.get("topic_id")
                return count, str(topic_id) if topic_id else None
    raise TopicMissing(bootstrap, topic)


def ensure_topic(
    bootstrap: str, topic: str, partitions: int = 1, *, security: KafkaSecurity | None = None
) -> int:
    """Create ``topic`` with ``partitions`` unless it exists; return its partition count.

    An existing topic is left as it is (its partition count may differ from the request).
    """
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    admin = admin_client(bootstrap, security=security)
    try:
        try:
            return topic_partitions(admin, bootstrap, topic)
        except TopicMissing:
            pass
        # TopicAlreadyExistsError: created concurrently by someone else, which is fine.
        with translate_errors(bootstrap), contextlib.suppress(TopicAlreadyExistsError):
            admin.create_topics(
                {topic: {"num_partitions": partitions, "replication_factor": 1}},
                timeout_ms=REQUEST_TIMEOUT_MS,
            )
        # The new topic may take a moment to appear in metadata; wait for it, bounded.
        for attempt in Retrying(
            stop=stop_after_delay(REQUEST_TIMEOUT_MS / 1000),
            wait=wait_fixed(0.1),
            retry=retry_if_exception_type(TopicMissing),
            reraise=True,
        ):
            with attempt:
                return topic_partitions(admin, bootstrap, topic)
        raise AssertionError("unreachable")  # pragma: no cover
    finally:
        close_quietly(admin)


def probe_consumer(
    bootstrap: str,
    *,
    partition_fetch_bytes: int = 64 * 1024,
    security: KafkaSecurity | None = None,
) -> KafkaConsumer:
    """A group-less consumer for short reads: small fetches, short broker-side waits.

    Small fetches matter: kafka-python decodes every record a fetch returns, in Python, so
    the less each fetch carries, the faster a probe or a backfill round.
    Observed with tansu + kafka-python 3: a consumer that ``pause()``s a partition and is
    then reused with further seeks stops receiving records for it; only single-shot probes
    (:func:`fetch_heads`) pause.
    """
    return consumer(
        bootstrap,
        group=None,
        client_id="kale-probe",
        security=security,
        fetch_max_wait_ms=20,
        # tansu honours the request-wide fetch_max_bytes but not the per-partition limit:
        # cap both, or one fetch returns (and kafka-python decodes) the whole partition.
        # A batch larger than the cap still comes back whole (KIP-74).
        max_partition_fetch_bytes=partition_fetch_bytes,
        fetch_max_bytes=partition_fetch_bytes * 4,
        # kafka-python's CRC32C is pure Python and slow; localhost TCP is checked.
        check_crcs=False,
    )


def close_quietly(client: Any, timeout_ms: int = 2_000) -> None:
    """Close a kafka-python client without raising and without waiting long."""
    if client is None:
        return
    with contextlib.suppress(Exception):
        if isinstance(client, KafkaConsumer):
            client.close(autocommit=False, timeout_ms=timeout_ms)
        elif isinstance(client, KafkaProducer):
            client.close(timeout=timeout_ms / 1000)
        else:
            client.close()
