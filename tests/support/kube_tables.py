"""The Table form of lists and objects (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``).

``kubectl get`` asks the API server to print: the server answers a ``meta.k8s.io/v1 Table``
whose columns and cells kubectl only lays out. For a custom resource the columns are
``Name`` and the CRD's ``additionalPrinterColumns``, each cell the first result of the
column's JSONPath on the object, converted by the column's type as the apiextensions server
converts it (``integer`` truncates a float, ``number`` is a float, ``date`` is a human
duration since the time); a CRD without printer columns gets ``Name`` and ``Age``. Built-in
kinds get the columns kubectl users know (:data:`PRINTERS`, a subset of the server's
printers), others ``Name`` and ``Age``. ``includeObject`` decides what each row carries
(``Metadata``, the default: a PartialObjectMetadata, from which ``kubectl get -A`` prints
the namespace; ``Object``; ``None``).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Callable
from typing import Any

NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}
AGE_COLUMN = {
    "name": "Age",
    "type": "date",
    "jsonPath": ".metadata.creationTimestamp",
    "description": "CreationTimestamp is a timestamp representing the server time when this "
    "object was created.",
}


def wants_table(accept: str | None) -> bool:
    """Whether an ``Accept`` header asks for the Table form."""
    return any("as=Table" in part for part in (accept or "").split(","))


# -- JSONPath, the subset printer columns use ------------------------------------------------
_STEP = re.compile(
    r"\.(?P<field>[A-Za-z0-9_-]+)"
    r"|\[(?P<filter>\?\(@\.(?P<key>[A-Za-z0-9_.-]+)\s*==\s*[\"'](?P<value>[^\"']*)[\"']\))\]"
    r"|\[(?P<slice>-?\d*:-?\d*)\]"
    r"|\[(?P<index>-?\d+)\]"
    r"|\[(?P<star>\*)\]"
)


def json_path(obj: Any, path: str) -> list[Any]:
    """The values ``path`` (``.status.conditions[?(@.type=="Ready")].status``,
    ``.status.conditions[-1:].type``, ``.items[0]``, ``[*]``) finds in ``obj``."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    nodes, pos = [obj], 0
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:
            raise ValueError(f"unsupported JSONPath {path!r} at {path[pos:]!r}")
        pos = m.end()
        out: list[Any] = []
        for node in nodes:
            if m["field"] is not None:
                if isinstance(node, dict) and m["field"] in node:
                    out.append(node[m["field"]])
            elif not isinstance(node, list):
                continue
            elif m["filter"] is not None:
                out += [n for n in node if _dig(n, m["key"]) == m["value"]]
            elif m["slice"] is not None:
                lo, hi = (int(p) if p else None for p in m["slice"].split(":"))
                out += node[lo:hi]
            elif m["index"] is not None:
                i = int(m["index"])
                if -len(node) <= i < len(node):
                    out.append(node[i])
            else:
                out += node
        nodes = out
    return nodes


def _dig(node: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


# -- cells -----------------------------------------------------------------------------------
def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration`` (what an ``Age`` cell shows)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def age(timestamp: Any, now: float) -> str | None:
    if not isinstance(timestamp, str):
        return None
    try:
        then = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return "<invalid>"
    return human_duration(now - then)


def cell(column_type: str, value: Any, now: float) -> Any:
    """A column's cell for ``value``, as the apiextensions table convertor makes it."""
    if value is None:
        return None
    if column_type == "integer":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return int(value)
    if column_type == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)
    if column_type == "boolean":
        return value if isinstance(value, bool) else None
    if column_type == "date":
        return age(value, now)
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value).lower()
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


# -- built-in printers ------------------------------------------------------------------------
def _col(name: str, type_: str = "string", priority: int = 0) -> dict[str, Any]:
    return {"name": name, "type": type_, "format": "", "description": name, "priority": priority}


def _ready_pods(obj: dict) -> str:
    st = obj.get("status") or {}
    want = (obj.get("spec") or {}).get("replicas", 1)
    return f"{st.get('readyReplicas', 0)}/{want}"


def _pod_ready(obj: dict) -> str:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    containers = (obj.get("spec") or {}).get("containers") or []
    return f"{sum(1 for c in statuses if c.get('ready'))}/{len(containers)}"


def _node_status(obj: dict) -> str:
    conds = (obj.get("status") or {}).get("conditions") or []
    ready = next((c for c in conds if c.get("type") == "Ready"), None)
    text = "Ready" if ready and ready.get("status") == "True" else "NotReady"
    if (obj.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


Row = Callable[[dict, float], list[Any]]
PRINTERS: dict[str, tuple[list[dict[str, Any]], Row]] = {
    "deployments": (
        [_col("Name"), _col("Ready"), _col("Up-to-date", "integer"),
         _col("Available", "integer"), _col("Age")],
        lambda o, now: [
            o["metadata"]["name"],
            _ready_pods(o),
            (o.get("status") or {}).get("updatedReplicas", 0),
            (o.get("status") or {}).get("availableReplicas", 0),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    "statefulsets": (
        [_col("Name"), _col("Ready"), _col("Age")],
        lambda o, now: [
            o["metadata"]["name"], _ready_pods(o), age(o["metadata"].get("creationTimestamp"), now)
        ],
    ),
    "pods": (
        [_col("Name"), _col("Ready"), _col("Status"), _col("Restarts", "integer"), _col("Age"),
         _col("Node", priority=1)],
        lambda o, now: [
            o["metadata"]["name"],
            _pod_ready(o),
            (o.get("status") or {}).get("phase", "Pending"),
            sum(c.get("restartCount", 0) for c in (o.get("status") or {}).get(
                "containerStatuses") or []),
            age(o["metadata"].get("creationTimestamp"), now),
            (o.get("spec") or {}).get("nodeName") or "<none>",
        ],
    ),
    "nodes": (
        [_col("Name"), _col("Status"), _col("Roles"), _col("Age"), _col("Version")],
        lambda o, now: [
            o["metadata"]["name"],
            _node_status(o),
            "<none>",
            age(o["metadata"].get("creationTimestamp"), now),
            ((o.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", ""),
        ],
    ),
    "events": (
        [_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")],
        lambda o, now: [
            age(o.get("lastTimestamp") or o.get("eventTime") or o["metadata"].get(
                "creationTimestamp"), now),
            o.get("type", ""),
            o.get("reason", ""),
            f"{(o.get('involvedObject') or {}).get('kind', '').lower()}/"
            f"{(o.get('involvedObject') or {}).get('name', '')}",
            o.get("message", ""),
        ],
    ),
    "configmaps": (
        [_col("Name"), _col("Data", "integer"), _col("Age")],
        lambda o, now: [
            o["metadata"]["name"],
            len(o.get("data") or {}) + len(o.get("binaryData") or {}),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    "secrets": (
        [_col("Name"), _col("Type"), _col("Data", "integer"), _col("Age")],
        lambda o, now: [
            o["metadata"]["name"],
            o.get("type", "Opaque"),
            len(o.get("data") or {}),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    "leases": (
        [_col("Name"), _col("Holder"), _col("Age")],
        lambda o, now: [
            o["metadata"]["name"],
            (o.get("spec") or {}).get("holderIdentity", ""),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
}  # fmt: skip


# -- the Table ---------------------------------------------------------------------------------
def _row_object(obj: dict, include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def table(
    payload: dict[str, Any],
    *,
    resource: str,
    printer_columns: list[dict[str, Any]] | None,
    include: str = "Metadata",
    now: float | None = None,
) -> dict[str, Any]:
    """``payload`` (a list, or one object) as a Table.

    ``printer_columns``: the CRD's ``additionalPrinterColumns`` for a custom resource (``[]``
    when it has none), None for a built-in.
    """
    now = time.time() if now is None else now
    items = payload.get("items") if "items" in payload else [payload]
    if printer_columns is None and resource in PRINTERS:
        columns, row_of = PRINTERS[resource]
        definitions = [dict(NAME_COLUMN, name=c["name"]) if i == 0 else c
                       for i, c in enumerate(columns)]  # fmt: skip
        cells = [row_of(o, now) for o in items or []]
    else:
        extra = printer_columns or [AGE_COLUMN]
        definitions = [NAME_COLUMN] + [
            {
                "name": c["name"],
                "type": c["type"],
                "format": c.get("format", ""),
                "description": c.get("description", ""),
                "priority": int(c.get("priority", 0)),
            }
            for c in extra
        ]
        cells = [
            [o["metadata"]["name"]]
            + [cell(c["type"], next(iter(json_path(o, c["jsonPath"])), None), now) for c in extra]
            for o in items or []
        ]
    rows = []
    for obj, row in zip(items or [], cells, strict=True):
        entry: dict[str, Any] = {"cells": row}
        shown = _row_object(obj, include)
        if shown is not None:
            entry["object"] = shown
        rows.append(entry)
    metadata = {k: v for k, v in (payload.get("metadata") or {}).items() if k == "resourceVersion"}
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    }
