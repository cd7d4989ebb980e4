"""Named, seeded workload families: variants of the openb default workload and Lublin queues.

A learned scheduler trained and selected on one workload says nothing about the next one.
The Fragmentation Gradient Descent paper (ATC'23) judges policies on workloads that vary
four proportions of the openb default trace; the Lublin–Feitelson model
(:mod:`placement.workloads.lublin`) gives queue sequences at any load and machine size.
This module makes both kinds as *families*: a family is a named distribution, a seed picks
one workload of it, and the same (family, seed) always gives the same files.

**openb families** resample the source pod list (the trace's default list) by kind —
CPU-only, sharing one GPU, one whole GPU, multi-GPU — so every generated pod is a real
request of the trace (its CPU, memory, GPUs and times), and only the mix changes. The four
proportions (each ``None`` = as in the source):

* ``sharing`` — the share of GPU pods that share a GPU (source: 0.436);
* ``multi_gpu`` — the share of the GPU pods' total GPU request (milli) asked by pods of two
  GPUs or more (source: 0.073);
* ``constrained`` — the share of GPU pods restricted to some GPU models (source: 0); a pod
  that gains a constraint is given one or two models, drawn by GPU capacity among the
  models whose nodes could host it;
* ``cpu_only_cpu`` — the CPU-only pods' share of the list's total CPU request (source:
  0.225): more CPU-only pods beside the same GPU pods.

Plus the cluster size, ``nodes`` (a share of the source node list: a seeded subset below
1, whole copies plus a subset above). The number of GPU pods stays the source's (scaled by
``nodes`` when the cluster is scaled, so the pressure stays alike); sharing and multi-GPU
pods are counted out of it; CPU-only pods are drawn until their CPU share is the target
(the source's when the family leaves it: a sharing-heavy list asks less CPU per GPU pod, so
it gets fewer CPU-only pods).

**Lublin families** are Lublin-model sequences at an offered load (the jobs' processor-
seconds over the machine's capacity over the span of submits) on a machine of a given size.

Names: ``default``, ``sharing-heavy``, ``multi-gpu-heavy``, ``cpu-heavy``,
``model-constrained``, ``small-cluster``, … (:data:`NAMED`), or parts joined by ``+`` —
``sharing-0.8``, ``multi-gpu-0.3``, ``constrained-0.25``, ``cpu-0.5``, ``nodes-0.5``
(openb), ``lublin-load-0.8``, ``procs-128`` (Lublin) — e.g. ``sharing-0.8+nodes-0.5``.
``train-mix`` and ``train-lublin`` draw the proportions themselves from the seed, within
:data:`TRAINING_BOX` and :data:`TRAINING_LOADS`: what the learned schedulers train on. The
named heavy families lie outside that box on their axis, so an agent judged on them never
saw their mix (docs/placement.md, "Workload families").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from placement.cluster import NodeSpec
from placement.errors import PlacementInputError
from placement.pod import MILLI, Pod
from placement.workloads.batch import BatchJobs

AXES = ("sharing", "multi_gpu", "constrained", "cpu_only_cpu")
"""The four proportions of an openb family, in the FGD paper's order."""
AXIS_PREFIX = {
    "sharing": "sharing",
    "multi-gpu": "multi_gpu",
    "constrained": "constrained",
    "cpu": "cpu_only_cpu",
}
"""Name part → axis (``sharing-0.8`` sets ``sharing`` to 0.8)."""


@dataclass(frozen=True)
class Mix:
    """Target proportions of an openb family (None: as in the source pod list)."""

    sharing: float | None = None
    multi_gpu: float | None = None
    constrained: float | None = None
    cpu_only_cpu: float | None = None

    def __post_init__(self) -> None:
        for axis in AXES:
            value = getattr(self, axis)
            if value is not None and not 0 <= value < 1:
                raise PlacementInputError(f"{axis} must be in [0, 1), got {value}")


@dataclass(frozen=True)
class OpenbFamily:
    """A variant of the openb default workload: a pod mix and a cluster size."""

    name: str
    mix: Mix = Mix()
    nodes: float = 1.0
    """Share of the source node list (above 1: copies)."""
    random_mix: bool = False
    """Draw the mix from :data:`TRAINING_BOX` with the seed (``train-mix``)."""


@dataclass(frozen=True)
class LublinFamily:
    """Lublin-model sequences at an offered load on a machine of ``processors``."""

    name: str
    load: float | None = None
    """Offered load; None: the model's own arrival rate."""
    processors: int = 256
    random_load: bool = False
    """Draw the load from :data:`TRAINING_LOADS` and the machine from
    :data:`TRAINING_PROCESSORS` with the seed (``train-lublin``)."""


Family = OpenbFamily | LublinFamily

NAMED: dict[str, str] = {
    "default": "",
    "sharing-heavy": "sharing-0.8",
    "sharing-light": "sharing-0.2",
    "multi-gpu-heavy": "multi-gpu-0.4",
    "cpu-heavy": "cpu-0.5",
    "model-constrained": "constrained-0.3",
    "small-cluster": "nodes-0.25",
    "half-cluster": "nodes-0.5",
    "lublin": "lublin-load-",
}
"""Families by name → their parts (``lublin`` alone: the model's own load)."""

TRAINING_BOX: dict[str, tuple[float, float]] = {
    "sharing": (0.25, 0.65),
    "multi_gpu": (0.02, 0.3),
    "constrained": (0.0, 0.2),
    "cpu_only_cpu": (0.1, 0.4),
}
"""Where ``train-mix`` draws each proportion (uniformly). The named heavy families lie
outside it on their axis (sharing 0.8, multi-GPU 0.4, constrained 0.3, CPU 0.5)."""
TRAINING_NODES = (0.1, 0.25)
"""``train-mix``'s cluster: a share of the nodes drawn uniformly in this range."""
TRAINING_LOADS = (0.6, 1.4)
"""``train-lublin``'s offered load, drawn uniformly."""
TRAINING_PROCESSORS = (64, 128, 256, 512)
"""``train-lublin``'s machine, drawn uniformly."""
LUBLIN_JOBS = 1024
"""Jobs per Lublin sequence (RLScheduler's sequence length)."""


def family_names() -> list[str]:
    """The named families and the two training ones (for ``--help`` and errors)."""
    return [*NAMED, "train-mix", "train-lublin"]


def _number(part: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise PlacementInputError(f"family part {part!r}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise PlacementInputError(f"family part {part!r}: not a finite number")
    return value


def parse_family(text: str) -> Family:
    """The family called ``text`` (see the module docstring); a bad name lists the known."""
    name = text.strip()
    if name == "train-mix":
        return OpenbFamily(name, random_mix=True)
    if name == "train-lublin":
        return LublinFamily(name, random_load=True)
    parts = [p for p in NAMED.get(name, name).split("+")]
    mix: dict[str, float] = {}
    nodes, load, procs = 1.0, None, None
    lublin = False
    for raw in parts:
        part = NAMED.get(raw.strip(), raw.strip())
        if not part:
            continue
        if part.startswith("lublin-load-"):
            lublin = True
            value = part.removeprefix("lublin-load-")
            load = _number(part, value) if value else None
            continue
        if part.startswith("procs-"):
            procs = int(_number(part, part.removeprefix("procs-")))
            continue
        if part.startswith("nodes-"):
            nodes = _number(part, part.removeprefix("nodes-"))
            continue
        prefix, _, value = part.rpartition("-")
        axis = AXIS_PREFIX.get(prefix)
        if axis is None:
            known = ", ".join(family_names())
            raise PlacementInputError(
                f"unknown workload family {text!r} (known: {known}; or parts such as "
                "sharing-0.8, multi-gpu-0.3, constrained-0.25, cpu-0.5, nodes-0.5, "
                "lublin-load-0.8, procs-128 joined by '+')"
            )
        mix[axis] = _number(part, value)
    if lublin or procs is not None:
        if mix or nodes != 1.0:
            raise PlacementInputError(f"{text!r}: a Lublin family has only a load and procs")
        if load is not None and not 0 < load <= 4:
            raise PlacementInputError(f"{text!r}: the load must be in (0, 4]")
        if procs is not None and procs < 2:
            raise PlacementInputError(f"{text!r}: a machine needs 2 processors or more")
        return LublinFamily(name, load, procs or 256)
    if not 0 < nodes <= 16:
        raise PlacementInputError(f"{text!r}: the node share must be in (0, 16]")
    return OpenbFamily(name, Mix(**mix), nodes)


# -- measuring a pod list ------------------------------------------------------------------


def measure_mix(pods: Sequence[Pod]) -> dict[str, float]:
    """The four proportions of a pod list (the module docstring's definitions)."""
    gpu = [p for p in pods if p.is_gpu]
    gpu_milli = sum(p.total_gpu_milli for p in gpu)
    cpu_total = sum(p.cpu_milli for p in pods)
    return {
        "sharing": sum(p.is_sharing for p in gpu) / max(len(gpu), 1),
        "multi_gpu": sum(p.total_gpu_milli for p in gpu if p.num_gpu > 1) / max(gpu_milli, 1),
        "constrained": sum(bool(p.gpu_models) for p in gpu) / max(len(gpu), 1),
        "cpu_only_cpu": sum(p.cpu_milli for p in pods if not p.is_gpu) / max(cpu_total, 1),
    }


# -- generating openb families ---------------------------------------------------------------


@dataclass(frozen=True)
class OpenbWorkload:
    """A generated openb workload: its nodes, pods, and what was asked and obtained."""

    family: OpenbFamily
    seed: int
    nodes: list[NodeSpec]
    pods: list[Pod]
    targets: dict[str, float]
    """The proportions aimed at (the source's where the family leaves one as it is)."""
    realised: dict[str, float]


def _pool(pods: Sequence[Pod]) -> dict[str, list[Pod]]:
    pools: dict[str, list[Pod]] = {"cpu": [], "sharing": [], "whole": [], "multi": []}
    for p in pods:
        kind = "cpu" if not p.is_gpu else "sharing" if p.is_sharing else "whole"
        pools["multi" if p.num_gpu > 1 else kind].append(p)
    return pools


def draw_mix(rng: np.random.Generator) -> tuple[Mix, float]:
    """``train-mix``'s proportions and node share (uniform in the training box)."""
    values = {axis: float(rng.uniform(*TRAINING_BOX[axis])) for axis in AXES}
    return Mix(**values), float(rng.uniform(*TRAINING_NODES))


def scale_nodes(
    nodes: Sequence[NodeSpec], share: float, rng: np.random.Generator
) -> list[NodeSpec]:
    """A seeded share of ``nodes``: a subset below 1, whole copies plus a subset above
    (copies renamed ``NAME-c1``, …). File order is kept; at least two nodes."""
    copies, rest = divmod(share, 1.0)
    out: list[NodeSpec] = []
    for c in range(int(copies)):
        out.extend(n if c == 0 else replace(n, name=f"{n.name}-c{c}") for n in nodes)
    extra = round(rest * len(nodes))
    if extra:
        picked = np.sort(rng.choice(len(nodes), extra, replace=False))
        suffix = f"-c{int(copies)}" if copies else ""
        out.extend(replace(nodes[i], name=f"{nodes[i].name}{suffix}") for i in picked)
    if len(out) < 2:
        raise PlacementInputError(f"a node share of {share:g} keeps fewer than two nodes")
    return out


def _stream(rng: np.random.Generator, pool: Sequence[Pod], count: int) -> list[Pod]:
    """``count`` pods drawn from ``pool`` with replacement (none from an empty pool: a kind
    the source lacks stays absent, and ``realised`` says how far that left the target)."""
    return [pool[i] for i in rng.integers(len(pool), size=count)] if count and pool else []


def _multi_count(sharing_milli: float, remaining: int, stream: list[Pod], target: float) -> int:
    """How many of ``stream``'s multi-GPU pods (the rest of ``remaining`` take one whole GPU
    each) bring their share of the GPU request closest to ``target``."""
    milli = np.concatenate([[0.0], np.cumsum([p.total_gpu_milli for p in stream])])
    m = np.arange(len(milli))
    share = milli / (sharing_milli + (remaining - m) * MILLI + milli)
    return int(np.argmin(np.abs(share - target)))


class _Hosts:
    """GPU model → capacity of the nodes that could host a pod alone (vectorised)."""

    def __init__(self, nodes: Sequence[NodeSpec]) -> None:
        gpu_nodes = [n for n in nodes if n.gpus]
        self.models = sorted({n.model for n in gpu_nodes})
        self.model = np.array([self.models.index(n.model) for n in gpu_nodes], np.int64)
        self.gpus = np.array([n.gpus for n in gpu_nodes], np.int64)
        self.cpu = np.array([n.cpu_milli for n in gpu_nodes], np.int64)
        self.mem = np.array([n.memory_mib for n in gpu_nodes], np.int64)

    def constrain(self, pod: Pod, rng: np.random.Generator) -> Pod:
        """``pod`` restricted to one or two of the models that could host it, drawn by their
        GPUs on such nodes (unchanged when no node could host it)."""
        fits = (self.gpus >= pod.num_gpu) & (self.cpu >= pod.cpu_milli)
        fits &= self.mem >= pod.memory_mib
        weights = np.bincount(
            self.model[fits], weights=self.gpus[fits], minlength=len(self.models)
        ).astype(float)
        hosts = np.flatnonzero(weights)
        if not hosts.size:
            return pod
        size = min(hosts.size, 1 if rng.random() < 0.6 else 2)
        p = weights[hosts] / weights[hosts].sum()
        chosen = rng.choice(hosts, size=size, replace=False, p=p)
        return replace(pod, gpu_models=frozenset(self.models[i] for i in chosen))


def _cpu_only_count(gpu_cpu: float, stream: list[Pod], target: float) -> int:
    """How many of ``stream``'s CPU-only pods bring their CPU share closest to ``target``."""
    cpu = np.concatenate([[0.0], np.cumsum([p.cpu_milli for p in stream])])
    share = cpu / np.maximum(cpu + gpu_cpu, 1.0)
    return int(np.argmin(np.abs(share - target)))


def generate_openb(
    family: OpenbFamily | str,
    nodes: Sequence[NodeSpec],
    pods: Sequence[Pod],
    *,
    seed: int,
) -> OpenbWorkload:
    """One workload of ``family`` from the source ``nodes`` and ``pods`` (module docstring).

    Pods come out in creation-time order, named ``gen-pod-00000``…; every random draw comes
    from one generator seeded with ``seed``, so the same inputs give the same workload."""
    fam = parse_family(family) if isinstance(family, str) else family
    if not isinstance(fam, OpenbFamily):
        raise PlacementInputError(f"{fam.name!r} is a Lublin family: it makes SWF jobs")
    if not nodes or not pods:
        raise PlacementInputError("a family needs the source node and pod lists")
    rng = np.random.default_rng([seed, 0x0F4B])
    mix, share = draw_mix(rng) if fam.random_mix else (fam.mix, fam.nodes)
    source = measure_mix(pods)
    targets = {a: (getattr(mix, a) if getattr(mix, a) is not None else source[a]) for a in AXES}
    out_nodes = list(nodes) if share == 1.0 else scale_nodes(nodes, share, rng)
    pools = _pool(pods)
    gpu_count = max(1, round((len(pods) - len(pools["cpu"])) * share))
    sharing = _stream(rng, pools["sharing"], round(targets["sharing"] * gpu_count))
    sharing_milli = float(sum(p.gpu_milli for p in sharing))
    remaining = gpu_count - len(sharing)
    multi_stream = _stream(rng, pools["multi"], remaining)
    count = _multi_count(sharing_milli, remaining, multi_stream, targets["multi_gpu"])
    multi = multi_stream[:count]
    whole = _stream(rng, pools["whole"], remaining - len(multi))
    gpu_pods = sharing + whole + multi
    order = rng.permutation(len(gpu_pods))
    gpu_pods = [gpu_pods[i] for i in order]
    want = round(targets["constrained"] * len(gpu_pods))
    already = [i for i, p in enumerate(gpu_pods) if p.gpu_models]
    if len(already) > want:  # loosen constraints the source had, down to the target
        for i in rng.choice(already, len(already) - want, replace=False):
            gpu_pods[i] = replace(gpu_pods[i], gpu_models=frozenset())
    free = [i for i, p in enumerate(gpu_pods) if not p.gpu_models]
    if want > len(already) and free:
        hosts = _Hosts(out_nodes)
        for i in rng.choice(free, min(want - len(already), len(free)), replace=False):
            gpu_pods[i] = hosts.constrain(gpu_pods[i], rng)
    gpu_cpu = float(sum(p.cpu_milli for p in gpu_pods))
    stream = _stream(rng, pools["cpu"], max(10 * len(gpu_pods), 1))
    cpu_pods = stream[: _cpu_only_count(gpu_cpu, stream, targets["cpu_only_cpu"])]
    result = _name_and_order(gpu_pods + cpu_pods, rng)
    return OpenbWorkload(fam, seed, out_nodes, result, targets, measure_mix(result))


def _name_and_order(pods: list[Pod], rng: np.random.Generator) -> list[Pod]:
    """Interleave the kinds at random, then order by creation time (stable), and rename."""
    shuffled = [pods[i] for i in rng.permutation(len(pods))]
    shuffled.sort(key=lambda p: math.inf if p.creation_time is None else p.creation_time)
    return [replace(p, name=f"gen-pod-{i:05d}") for i, p in enumerate(shuffled)]


# -- generating Lublin families --------------------------------------------------------------


@dataclass(frozen=True)
class LublinWorkload:
    """A generated Lublin sequence and what was asked and obtained."""

    family: LublinFamily
    seed: int
    jobs: BatchJobs
    processors: int
    target_load: float | None
    realised_load: float


def offered_load(jobs: BatchJobs, processors: int) -> float:
    """Processor-seconds asked over the machine's processor-seconds from the first to the
    last submit (> 1: the queue grows without bound over the span)."""
    span = float(jobs.submit_s.max() - jobs.submit_s.min()) if len(jobs) > 1 else 0.0
    work = float(np.sum(np.minimum(jobs.size, processors) * jobs.run_s))
    return work / max(span * processors, 1.0)


@lru_cache(maxsize=16)
def model_load(processors: int, *, sample: int = 20_000) -> float:
    """The Lublin model's offered load on ``processors`` at its own arrival rate (a long
    seed-0 sample, so every family's scale comes from the same measurement)."""
    from placement.workloads.lublin import generate_lublin

    return offered_load(generate_lublin(sample, processors=processors, seed=0), processors)


def generate_lublin_family(
    family: LublinFamily | str, *, seed: int, jobs: int = LUBLIN_JOBS
) -> LublinWorkload:
    """One Lublin-model sequence of ``family``: the arrival gaps scaled so that the model's
    long-run offered load is the family's (each sequence's own load varies around it)."""
    from placement.workloads.lublin import LublinModel, generate_lublin

    fam = parse_family(family) if isinstance(family, str) else family
    if not isinstance(fam, LublinFamily):
        raise PlacementInputError(f"{fam.name!r} is an openb family: it makes nodes and pods")
    if jobs < 2:
        raise PlacementInputError("a Lublin sequence needs two jobs or more")
    load, procs = fam.load, fam.processors
    if fam.random_load:
        rng = np.random.default_rng([seed, 0x1B11])
        load = float(rng.uniform(*TRAINING_LOADS))
        procs = int(rng.choice(TRAINING_PROCESSORS))
    scale = 1.0 if load is None else model_load(procs) / load
    generated = generate_lublin(
        jobs, processors=procs, seed=seed, model=LublinModel(arrival_scale=scale)
    )
    return LublinWorkload(fam, seed, generated, procs, load, offered_load(generated, procs))
