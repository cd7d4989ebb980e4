"""The value types of an ElasticTrainingJob's fields: name grammars, bounded durations, paths.

Why a module of their own: each type carries both its check (run by pydantic, with a message
naming what is expected) and the JSON Schema the CRD is generated from (``pattern``,
``maxLength``, duration bounds), so the API server and ``kale validate`` cannot drift apart.
Grammars are matched whole (``fullmatch``): ``$`` with ``re.match`` let ``"name\\n"`` through.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, Strict

from common.durations import Duration, PositiveDuration, duration_value

__all__ = ["Duration", "PositiveDuration"]

DAY = 86400.0
# Name grammars, matched with fullmatch (``$`` with ``match`` let "name\n" through). The CRD
# carries the same regular expressions as ``pattern`` (anchored with ^…$: Go's RE2 ``$`` is
# the end of the text).
DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
TOPIC = r"[a-zA-Z0-9._-]{1,249}"
_LABEL = r"[A-Za-z0-9](?:[-A-Za-z0-9_]{0,61}[A-Za-z0-9])?"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_DOTTED_QUAD = rf"(?:{_OCTET}\.){{3}}{_OCTET}"
_PORT = r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
# A host is a dotted quad or a DNS name whose last label starts with a letter: "2130706433",
# "127.1" or "0x7f000001" are addresses to a resolver and would slip past a CIDR allow-list.
HOSTNAME = rf"(?:{_DOTTED_QUAD}|(?:{_LABEL}\.)*[A-Za-z](?:[-A-Za-z0-9_]{{0,61}}[A-Za-z0-9])?)"
HOSTPORT = rf"{HOSTNAME}:{_PORT}"
CONSUMER_GROUP = r"[^\x00-\x1f\x7f]{1,255}"
# Go's RE2 caps a repetition count at 1000: longer bounds go to maxLength instead.
MODEL_PATH = r"[^\x00-\x1f\x7f]*\.json"
FILE_PATH = r"[^\x00-\x1f\x7f]+"


def _short(value: str) -> str:
    return value if len(value) <= 80 else value[:77] + "..."


def _pattern(regex: str, what: str, *, max_length: int) -> Any:
    """A string type that must fullmatch ``regex``; the CRD gets ``^(?:regex)$``."""
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"{_short(value)!r} is not {what}")
        return value

    return Annotated[
        str,
        Strict(),
        AfterValidator(check),
        Field(max_length=max_length, json_schema_extra={"pattern": f"^(?:{regex})$"}),
    ]


def _bounded(**bounds: float) -> Any:
    """A duration with per-field bounds (``gt``/``ge``/``le``, in seconds)."""
    return Annotated[float, BeforeValidator(duration_value), Field(**bounds)]  # type: ignore[call-overload]


PositiveInt = Annotated[int, Field(strict=True, ge=1)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]
Text = Annotated[str, Strict()]

DnsLabel = _pattern(
    DNS_LABEL,
    "a DNS-1123 label (lowercase letters, digits, '-', at most 63 characters)",
    max_length=63,
)
DnsName = _pattern(DNS_LABEL, "a DNS-1123 name", max_length=63)
HostPort = _pattern(HOSTPORT, "host:port", max_length=261)
Topic = _pattern(
    TOPIC, "a valid Kafka topic name (letters, digits, '.', '_', '-'; at most 249)", max_length=249
)
ConsumerGroup = _pattern(
    CONSUMER_GROUP, "a consumer group (1-255 characters, no control characters)", max_length=255
)
ModelPath = _pattern(
    MODEL_PATH, "a path to a .json throughput model (no control characters)", max_length=1024
)
FilePath = _pattern(FILE_PATH, "a file path (no control characters)", max_length=1024)
Argument = _pattern(
    r"[^\x00]*", "a command argument (no NUL, at most 4096 characters)", max_length=4096
)


# An object another controller owns, named as the HPA's scaleTargetRef names it.
_SUBDOMAIN = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
GroupVersion = _pattern(
    rf"{_SUBDOMAIN}/v[0-9]+(?:(?:alpha|beta)[0-9]+)?",
    "an apiVersion group/version such as apps/v1 (the object's API group and version)",
    max_length=317,
)
KindName = _pattern(
    r"[A-Z][A-Za-z0-9]{0,62}", "a kind such as Deployment (CamelCase, at most 63)", max_length=63
)
ObjectName = _pattern(
    r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?",
    "an object name (a DNS-1123 subdomain, at most 253 characters)",
    max_length=253,
)


LabelKey = Annotated[str, Strict(), Field(max_length=317)]
LabelValue = Annotated[str, Strict(), Field(max_length=1024)]
AnnotationValue = Annotated[str, Strict(), Field(max_length=262144)]
