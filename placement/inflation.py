"""The inflation experiment of "Beware of Fragmentation" (ATC'23), rule for rule.

For one seed: sort the pod list by name and shuffle it; tune it toward ``T = tune ×`` the
cluster's GPU milli — below ``T`` append clones of pods drawn uniformly from the sorted
original list until the next draw's *per-GPU* milli would pass ``T`` (each clone adds its
``m·k``); above ``T`` remove uniformly drawn arrivals while the total exceeds ``T``. Then a
random node order for tie-breaks. Pods arrive one by one (originals first, then clones),
never leave, and a pod that fits nowhere fails and is not retried. All randomness comes
from one generator seeded with the seed, in that order (shuffle, tuning, node order, then
the Random policy's draws).

After every arrival the run records the GPU milli that has arrived (failed pods included)
and the milli allocated. The curve's column ``c`` (0…130) is the mean of ``allocated /
capacity`` (%, rounded to 0.01) over the arrivals whose ``arrived / capacity`` rounds to
``c`` — or, when none does, over those within ``c ± 1``. The headline is column 130 (and
100). Fragmentation (``placement.frag``, as % of the cluster's GPU milli) is sampled once
per column, right after the first arrival that reaches it, and after the last arrival.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from placement.cluster import Cluster, NodeSpec
from placement.errors import PlacementInputError
from placement.fallback import FallbackCounts, counts_of
from placement.frag import TypicalPods, frag_model, typical_pods
from placement.placer import place, tie_order
from placement.pod import Pod
from placement.policies import PolicyContext, ScorePolicy, make_policy, parse_policy_names

COLUMNS = 130


@dataclass(frozen=True)
class InflationSettings:
    """Knobs of the experiment (defaults: the paper's)."""

    tune: float = 1.3
    """Target arrived GPU milli as a multiple of the cluster's GPU milli."""
    columns: int = COLUMNS
    """The curve runs over arrived share 0..columns (%)."""
    coverage: float = 0.95
    """Share of the original pods the typical pod types must cover (FGD, fragmentation)."""
    track_fragmentation: bool = True


@dataclass
class InflationRun:
    """One policy on one seed."""

    policy: str
    seed: int
    arrivals: int
    failed_pods: int
    curve: dict[int, float]
    frag_curve: dict[int, float]
    frag_final_milli: float
    frag_final_ratio: float
    capacity: int
    seconds: float
    arrived: np.ndarray = field(repr=False)
    allocated: np.ndarray = field(repr=False)
    fallbacks: FallbackCounts | None = None
    """A guarded agent's decisions and those its rule made (None: not guarded)."""

    @property
    def final(self) -> float:
        return self.curve.get(COLUMNS, float("nan"))

    @property
    def at100(self) -> float:
        return self.curve.get(100, float("nan"))


def arrival_list(
    pods: Sequence[Pod], capacity_milli: int, *, tune: float, rng: np.random.Generator
) -> list[Pod]:
    """The seed's arrival order: sorted by name, shuffled, tuned toward ``tune × capacity``."""
    if not pods:
        raise PlacementInputError("the pod list is empty")
    original = sorted(pods, key=lambda p: p.name)
    arrivals = [original[i] for i in rng.permutation(len(original))]
    total = sum(p.total_gpu_milli for p in arrivals)
    target = tune * capacity_milli
    if tune <= 0 or total == target:
        return arrivals
    if total > target:
        while total > target:
            removed = arrivals.pop(int(rng.integers(len(arrivals))))
            total -= removed.total_gpu_milli
        return arrivals
    if total == 0:
        raise PlacementInputError("no pod asks for a GPU: there is nothing to tune toward")
    clones = 0
    while True:
        pod = original[int(rng.integers(len(original)))]
        if total + pod.gpu_milli > target:  # the simulator's rule: per-GPU milli, not m·k
            return arrivals
        arrivals.append(pod.clone(f"{pod.name}-tuned-{clones}"))
        total += pod.total_gpu_milli
        clones += 1


def curve_columns(values: np.ndarray, arrived_pct: np.ndarray, columns: int) -> dict[int, float]:
    """Column c = mean of ``values`` where ``arrived_pct`` rounds to c (else within c ± 1)."""
    rounded = np.round(arrived_pct)
    out: dict[int, float] = {}
    for col in range(columns + 1):
        sel = rounded == col
        if not sel.any():
            sel = (rounded >= col - 1) & (rounded <= col + 1)
            if not sel.any():
                continue
        out[col] = round(float(values[sel].mean()), 2)
    return out


def run_inflation(
    nodes: Sequence[NodeSpec],
    pods: Sequence[Pod],
    policy: str,
    seed: int,
    settings: InflationSettings | None = None,
    *,
    typical: TypicalPods | None = None,
    factory: Callable[[PolicyContext], ScorePolicy] | None = None,
) -> InflationRun:
    """Run ``policy`` on one seed of the experiment (see the module docstring).

    ``factory`` builds the policy instead of the registry (``policy`` then only labels the
    run): a learned agent judging its own weights while it trains."""
    settings = settings or InflationSettings()
    started = time.perf_counter()
    cluster = Cluster(nodes)
    capacity = cluster.total_gpu_milli
    if capacity == 0:
        raise PlacementInputError("the cluster has no GPUs")
    if not pods:
        raise PlacementInputError("the pod list is empty")
    typical = typical or typical_pods(pods, coverage=settings.coverage)
    rng = np.random.default_rng(seed)
    arrivals = arrival_list(pods, capacity, tune=settings.tune, rng=rng)
    rank = tie_order(len(cluster), rng)
    context = PolicyContext(rng=rng, typical=typical)
    scorer = factory(context) if factory is not None else make_policy(policy, context)
    frag = frag_model(cluster, typical) if settings.track_fragmentation else None

    arrived = np.empty(len(arrivals), np.int64)
    allocated = np.empty(len(arrivals), np.int64)
    gpus = capacity // 1000
    frag_curve: dict[int, float] = {}
    arrived_total = allocated_total = failed = 0
    for i, pod in enumerate(arrivals):
        arrived_total += pod.total_gpu_milli
        if place(pod, cluster, scorer, rank=rank) is None:
            failed += 1
        else:
            allocated_total += pod.total_gpu_milli
        arrived[i], allocated[i] = arrived_total, allocated_total
        column = round(arrived_total / gpus / 10)
        if frag is not None and column not in frag_curve and column <= settings.columns:
            frag_curve[column] = round(float(frag.node_frag().sum()) / gpus / 10, 3)

    arrived_pct = arrived / gpus / 10
    alloc_pct = np.round(allocated / gpus / 10, 2)
    frag_final = float(frag.node_frag().sum()) if frag is not None else float("nan")
    free = float(cluster.gpu_free_total.sum())
    return InflationRun(
        policy=policy,
        seed=seed,
        arrivals=len(arrivals),
        failed_pods=failed,
        curve=curve_columns(alloc_pct, arrived_pct, settings.columns),
        frag_curve=frag_curve,
        frag_final_milli=frag_final,
        frag_final_ratio=frag_final / free if free > 0 else 0.0,
        capacity=capacity,
        seconds=time.perf_counter() - started,
        arrived=arrived,
        allocated=allocated,
        fallbacks=counts_of(scorer),
    )


def parse_seeds(text: str) -> list[int]:
    """``"42-51"`` → 42…51; ``"1,3,5-7"`` → [1, 3, 5, 6, 7] (order kept, no repeats)."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            if "-" in part[1:]:
                cut = part.index("-", 1)
                lo, hi = int(part[:cut]), int(part[cut + 1 :])
                if hi < lo:
                    raise ValueError
                seeds.extend(range(lo, hi + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise PlacementInputError(
                f"bad seed list {text!r}: use numbers and ranges like 42-51 or 1,3,5-7"
            ) from None
    if not seeds:
        raise PlacementInputError("no seeds given")
    return list(dict.fromkeys(seeds))


def _mean_curve(curves: list[dict[int, float]]) -> dict[str, float]:
    columns = sorted(set().union(*curves)) if curves else []
    return {str(c): round(float(np.mean([cv[c] for cv in curves if c in cv])), 3) for c in columns}


def summarize(runs: Sequence[InflationRun]) -> dict[str, dict[str, object]]:
    """Per policy: ``final``/``at100`` means over seeds (%), the mean curve, failed pods
    (mean over seeds), fragmentation, seconds per run, and ``per_seed`` details; for a
    guarded agent (``agent:PATH,fallback=RULE``) also ``fallback_decisions`` (summed over
    seeds, and per seed), ``fallback_reasons`` and ``guarded_decisions``."""
    out: dict[str, dict[str, object]] = {}
    for name in dict.fromkeys(r.policy for r in runs):
        mine = [r for r in runs if r.policy == name]
        per_seed: list[dict[str, object]] = [
            {
                "seed": r.seed,
                "final": r.final,
                "at100": r.at100,
                "failed_pods": r.failed_pods,
                "arrivals": r.arrivals,
                "frag_final_ratio": round(r.frag_final_ratio, 4),
                "seconds": round(r.seconds, 3),
            }
            for r in mine
        ]
        out[name] = {
            "final": round(float(np.mean([r.final for r in mine])), 3),
            "at100": round(float(np.mean([r.at100 for r in mine])), 3),
            "curve": _mean_curve([r.curve for r in mine]),
            "failed_pods": float(np.mean([r.failed_pods for r in mine])),
            "final_std": round(float(np.std([r.final for r in mine])), 3),
            "frag_final_pct": round(
                float(np.mean([r.frag_final_milli / r.capacity * 100 for r in mine])), 3
            ),
            "frag_final_ratio": round(float(np.mean([r.frag_final_ratio for r in mine])), 4),
            "frag_curve": _mean_curve([r.frag_curve for r in mine]),
            "seconds_per_run": round(float(np.mean([r.seconds for r in mine])), 3),
            "per_seed": per_seed,
        }
        if any(r.fallbacks is not None for r in mine):
            total = FallbackCounts()
            for r, entry in zip(mine, per_seed, strict=True):
                if r.fallbacks is not None:
                    total.add(r.fallbacks)
                    entry["fallback_decisions"] = r.fallbacks.fallbacks
            out[name].update(total.report())
    return out


def run_experiment(
    nodes: Sequence[NodeSpec],
    pods: Sequence[Pod],
    policies: Sequence[str] | str,
    seeds: Sequence[int],
    settings: InflationSettings | None = None,
    *,
    on_run: Callable[[InflationRun], None] | None = None,
) -> dict[str, object]:
    """Every policy on every seed; the JSON-ready ``{"policies": {name: summary}}``."""
    settings = settings or InflationSettings()
    names = parse_policy_names(policies) if isinstance(policies, str) else list(policies)
    parse_policy_names(",".join(names))
    if not seeds:
        raise PlacementInputError("no seeds to run")
    if not pods:
        raise PlacementInputError("the pod list is empty")
    typical = typical_pods(pods, coverage=settings.coverage)
    runs = []
    for name in names:
        for seed in seeds:
            run = run_inflation(nodes, pods, name, seed, settings, typical=typical)
            runs.append(run)
            if on_run is not None:
                on_run(run)
    return {
        "policies": summarize(runs),
        "settings": {
            "tune": settings.tune,
            "seeds": list(seeds),
            "typical_types": len(typical.types),
            "typical_coverage": round(typical.coverage, 4),
            "nodes": len(nodes),
            "pods": len(pods),
        },
    }
