"""How a policy name names a saved agent, and its options: ``agent:PATH[,fallback=RULE]``.

Policy names travel as comma-separated lists (``--policies bestfit,fgd``, ``--queue
sjf,f1``). An agent takes options written as ``KEY=VALUE`` items after its path, so
``bestfit,agent:balance_dqn.pt,fallback=fgd`` is two policies: BestFit, and the agent guarded
by FGD. A list item with ``=`` is never a policy name of its own, so the reading is
unambiguous; a path may not contain a comma. The only option is ``fallback`` — the rule
that decides whenever the agent cannot be trusted with a decision (``placement.fallback``;
``placement.policies.guard`` and ``placement.queue.guard`` apply it).
"""

from __future__ import annotations

from dataclasses import dataclass

from placement.errors import PlacementInputError

AGENT_PREFIX = "agent:"
"""``agent:PATH`` names a saved learned agent (``placement.agents``) instead of a heuristic."""
OPTIONS = ("fallback",)
"""What an agent name may carry after its path."""


@dataclass(frozen=True)
class AgentName:
    """A parsed ``agent:PATH[,fallback=RULE]``."""

    path: str
    fallback: str | None = None

    @property
    def text(self) -> str:
        """The name back as written (canonical order)."""
        tail = f",fallback={self.fallback}" if self.fallback else ""
        return f"{AGENT_PREFIX}{self.path}{tail}"


def is_agent(name: str) -> bool:
    """Whether ``name`` names a saved agent."""
    return name.strip().startswith(AGENT_PREFIX)


def parse_agent_name(name: str) -> AgentName:
    """``agent:PATH[,KEY=VALUE…]`` → :class:`AgentName`; a missing path, an unknown or
    repeated option, or an empty value is a :class:`PlacementInputError`."""
    text = name.strip()
    if not text.startswith(AGENT_PREFIX):
        raise PlacementInputError(f"{name!r} does not name an agent (agent:PATH)")
    path, *items = (part.strip() for part in text[len(AGENT_PREFIX) :].split(","))
    if not path:
        raise PlacementInputError(f"{name!r}: give the agent file after 'agent:'")
    options: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in OPTIONS:
            raise PlacementInputError(
                f"{name!r}: unknown agent option {item!r} (known: "
                + ", ".join(f"{o}=RULE" for o in OPTIONS)
                + ")"
            )
        if not value:
            raise PlacementInputError(f"{name!r}: {key}= needs a value")
        if key in options:
            raise PlacementInputError(f"{name!r}: {key} is given twice")
        options[key] = value
    fallback = options.get("fallback")
    if fallback is not None and is_agent(fallback):
        raise PlacementInputError(f"{name!r}: the fallback must be a rule, not an agent")
    return AgentName(path, fallback)


def split_policy_list(text: str) -> list[str]:
    """``"bestfit,agent:a.pt,fallback=fgd"`` → ``["bestfit", "agent:a.pt,fallback=fgd"]``:
    items with ``=`` belong to the agent before them (blank items are dropped)."""
    names: list[str] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        if "=" in item and not is_agent(item):
            if not names or not is_agent(names[-1]):
                raise PlacementInputError(
                    f"{item!r} in {text!r}: options follow an agent (agent:PATH,{item})"
                )
            names[-1] = f"{names[-1]},{item}"
            continue
        names.append(item)
    return names
