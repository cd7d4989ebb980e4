"""Required node affinity: which nodes a pod's ``nodeSelectorTerms`` allow.

``spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`` is evaluated
as kube-scheduler's NodeAffinity filter does: the terms are ORed, the requirements of one
term ANDed; ``matchExpressions`` test node labels with ``In``, ``NotIn``, ``Exists``,
``DoesNotExist``, ``Gt`` and ``Lt`` (integers; a label that is not one never matches), and
``matchFields`` test ``metadata.name`` with ``In``/``NotIn``. A term with no requirement
matches no node. Preferred (soft) affinity is not a filter and is not read: the placement
policy alone ranks the allowed nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions``/``matchFields`` entry."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, value: str | None) -> bool:
        """Whether a node whose label (or field) ``key`` is ``value`` (None: absent) passes."""
        op = self.operator
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        try:  # Gt, Lt: both sides integers
            have, bound = int(value or ""), int(self.values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound


@dataclass(frozen=True, slots=True)
class Term:
    """One ``nodeSelectorTerm``: every requirement must hold."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    def matches(self, name: str, labels: dict[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False
        return all(r.matches(labels.get(r.key)) for r in self.expressions) and all(
            r.matches(name) for r in self.fields
        )


NodeAffinity = tuple[Term, ...]
"""The ORed terms; a pod without required node affinity has None."""


def _requirement(raw: Any, *, field: bool) -> Requirement:
    if not isinstance(raw, dict):
        raise ValueError("a requirement must be a mapping")
    key, op, values = raw.get("key"), raw.get("operator"), raw.get("values") or []
    if not isinstance(key, str) or not key:
        raise ValueError("a requirement needs a key")
    if op not in (("In", "NotIn") if field else OPERATORS):
        raise ValueError(f"{key}: unsupported operator {op!r}")
    if field and key != "metadata.name":
        raise ValueError(f"matchFields supports only metadata.name, not {key!r}")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{key}: values must be a list of strings")
    if op in ("In", "NotIn") and not values:
        raise ValueError(f"{key}: {op} needs values")
    if op in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"{key}: {op} takes no values")
    if op in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
        raise ValueError(f"{key}: {op} needs one integer value")
    return Requirement(key, str(op), tuple(values))


def parse_node_affinity(spec: dict[str, Any]) -> NodeAffinity | None:
    """The pod's required node affinity (None: none); ValueError names what is malformed."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return None
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    if not isinstance(terms, list):
        raise ValueError("nodeSelectorTerms must be a list")
    return tuple(
        Term(
            tuple(_requirement(r, field=False) for r in (t or {}).get("matchExpressions") or []),
            tuple(_requirement(r, field=True) for r in (t or {}).get("matchFields") or []),
        )
        for t in terms
    )


def allows(affinity: NodeAffinity | None, name: str, labels: dict[str, str]) -> bool:
    """Whether a node called ``name`` with ``labels`` satisfies ``affinity``."""
    return affinity is None or any(term.matches(name, labels) for term in affinity)
