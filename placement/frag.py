"""GPU fragmentation against a workload's *typical* pods (the FGD paper's measure).

A node's free GPU milli is *fragmented* for a pod type it cannot host: all of it when the
type needs a model the node lacks, more CPU than is free, or more fitting GPUs than there
are (and always for a CPU-only type); when it *can* host the type, only the milli on GPUs
with less than the type's per-GPU milli. The node's fragmentation ``F`` is the frequency-
weighted sum over the typical types. FGD places each pod where ``F`` grows least.

Typical types (:func:`typical_pods`) are keyed by (cpu, per-GPU milli, GPU count, models),
counted on the workload's original pod list (CPU-only pods included), most frequent first,
until they cover 95 % of its pods; their weights are renormalised to sum to 1.

Floating point follows the authors' simulator operation for operation (per-category sums
accumulated type by type, then added category by category), because FGD's integer score
``⌊100·σ(ΔF/1000)⌋`` turns a rounding-level ``ΔF < 0`` into 49 instead of 50 and ties are
common: a different summation order would change placements, not just digits.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from placement.cluster import Cluster
from placement.pod import MILLI, Pod

DEFAULT_COVERAGE = 0.95

# Fragment categories of the simulator, in its order; Q3 (satisfied) is not fragmentation.
Q1_LACK_BOTH, Q2_LACK_GPU, Q3_SATISFIED, Q4_LACK_CPU, XL_SATISFIED, XR_LACK_CPU, NO_ACCESS = range(
    7
)
_SUMMED = (Q1_LACK_BOTH, Q2_LACK_GPU, Q4_LACK_CPU, XL_SATISFIED, XR_LACK_CPU, NO_ACCESS)


@dataclass(frozen=True, slots=True)
class PodType:
    """A typical pod: what fragmentation is measured against (memory plays no part)."""

    cpu_milli: int
    gpu_milli: int
    num_gpu: int
    models: frozenset[str] = frozenset()

    @classmethod
    def of(cls, pod: Pod) -> PodType:
        return cls(pod.cpu_milli, pod.gpu_milli, pod.num_gpu, pod.gpu_models)

    @property
    def spec(self) -> str:
        return "|".join(sorted(self.models))


@dataclass(frozen=True)
class TypicalPods:
    """The typical types, most frequent first, with weights summing to 1."""

    types: tuple[PodType, ...]
    weights: tuple[float, ...]
    coverage: float
    """Share of the workload's pods these types cover."""

    def as_dict(self) -> dict[str, object]:
        """Plain values (a learned agent's file keeps its training workload's types)."""
        return {
            "types": [[t.cpu_milli, t.gpu_milli, t.num_gpu, sorted(t.models)] for t in self.types],
            "weights": list(self.weights),
            "coverage": self.coverage,
        }

    @classmethod
    def from_dict(cls, values: dict[str, object]) -> TypicalPods:
        """The inverse of :meth:`as_dict`."""
        types = tuple(
            PodType(int(c), int(m), int(k), frozenset(models))
            for c, m, k, models in values["types"]  # type: ignore[attr-defined]
        )
        weights = tuple(float(w) for w in values["weights"])  # type: ignore[attr-defined]
        return cls(types, weights, float(values["coverage"]))  # type: ignore[arg-type]


def typical_pods(
    pods: Sequence[Pod], *, coverage: float = DEFAULT_COVERAGE, include_cpu: bool = True
) -> TypicalPods:
    """The most frequent pod types of ``pods`` covering at least ``coverage`` of them."""
    counts = Counter(PodType.of(p) for p in pods if include_cpu or p.is_gpu)
    if not counts:
        raise ValueError("no pods to take typical types from")
    total = float(sum(counts.values()))
    # most frequent first; equal counts: larger (cpu, milli, count, models) first
    ordered = sorted(
        counts.items(),
        key=lambda kv: (kv[1], kv[0].cpu_milli, kv[0].gpu_milli, kv[0].num_gpu, kv[0].spec),
        reverse=True,
    )
    expected = round(coverage * 100) * total / 100.0  # the simulator's integer percent
    kept: list[tuple[PodType, float]] = []
    cum = 0.0
    for pod_type, count in ordered:
        if cum >= expected:
            break
        cum += count
        kept.append((pod_type, count / total))
    share = cum / total
    return TypicalPods(tuple(t for t, _ in kept), tuple(f / share for _, f in kept), float(share))


class FragModel:
    """Vectorised ``F`` for one cluster and one set of typical pods.

    ``node_frag()`` memoises per node on ``cluster.node_version``; the ``after_*`` methods
    give ``F`` of hypothetical states (the node after a pod lands), for FGD.
    """

    def __init__(self, cluster: Cluster, typical: TypicalPods) -> None:
        self._cluster = weakref.ref(cluster)
        self.typical = typical
        types = typical.types
        self.t_cpu = np.array([t.cpu_milli for t in types], np.int64)
        self.t_milli = np.array([t.gpu_milli for t in types], np.int64)
        self.t_count = np.array([t.num_gpu for t in types], np.int64)
        self.t_weight = np.array(typical.weights, np.float64)
        self.t_cpu_only = self.t_milli == 0
        # access[n, t]: node n has a model type t may use (CPU-only types: never "hosted")
        self.access = np.stack(
            [
                np.zeros(len(cluster), bool) if t.gpu_milli == 0 else cluster.model_mask(t.models)
                for t in types
            ],
            axis=1,
        )
        n = len(cluster)
        self._version = np.full(n, -1, np.int64)
        self._cnt = np.zeros((n, len(types)), np.int64)
        self._fs = np.zeros((n, len(types)), np.int64)
        self._frag = np.zeros(n, np.float64)
        # nodes in the same state (model, free CPU, multiset of free GPU milli) have the same
        # F now and after any pod: FGD scores one representative per state
        self._state = np.zeros(n, np.int64)
        self._state_ids: dict[tuple[int, ...], int] = {}

    @property
    def cluster(self) -> Cluster:
        cluster = self._cluster()
        if cluster is None:
            raise RuntimeError("the cluster of this FragModel is gone")
        return cluster

    def gpu_counts(self, gpu_free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per (row, type): GPUs with ≥ m free, and the milli on GPUs with < m free."""
        g = gpu_free[:, :, None]
        m = self.t_milli[None, None, :]
        return (g >= m).sum(axis=1), np.where(g < m, g, 0).sum(axis=1)

    def frag(
        self,
        cpu_free: np.ndarray,
        cnt: np.ndarray,
        fs: np.ndarray,
        free_total: np.ndarray,
        access: np.ndarray,
    ) -> np.ndarray:
        """``F`` of states given as rows (cpu, per-type counts, node free total, access)."""
        w = self.t_weight[None, :]
        total = free_total[:, None].astype(np.float64)
        cpu_ok = cpu_free[:, None] >= self.t_cpu[None, :]
        hosted = access & (cnt >= self.t_count[None, :])
        satisfied = hosted & cpu_ok
        value = np.where(satisfied, w * fs, w * total)
        category = np.where(
            self.t_cpu_only[None, :],
            np.where(cpu_ok, XL_SATISFIED, XR_LACK_CPU),
            np.where(
                ~access,
                NO_ACCESS,
                np.where(
                    hosted,
                    np.where(cpu_ok, Q2_LACK_GPU, Q4_LACK_CPU),
                    np.where(cpu_ok, Q2_LACK_GPU, Q1_LACK_BOTH),
                ),
            ),
        )
        # per category, accumulate type by type (sequential, like the simulator) ...
        per_category = np.cumsum(
            np.where(category[:, None, :] == np.array(_SUMMED)[None, :, None], value[:, None], 0.0),
            axis=2,
        )[:, :, -1]
        # ... then add the categories one after another
        return np.cumsum(per_category, axis=1)[:, -1]

    def _refresh(self) -> None:
        c = self.cluster
        stale = np.flatnonzero(self._version != c.node_version)
        if stale.size == 0:
            return
        cnt, fs = self.gpu_counts(c.gpu_free[stale])
        self._cnt[stale], self._fs[stale] = cnt, fs
        self._frag[stale] = self.frag(
            c.cpu_free[stale], cnt, fs, c.gpu_free_total[stale], self.access[stale]
        )
        self._version[stale] = c.node_version[stale]
        rows = np.concatenate(
            [c.model_id[stale, None], c.cpu_free[stale, None], np.sort(c.gpu_free[stale], axis=1)],
            axis=1,
        ).tolist()
        ids = self._state_ids
        self._state[stale] = [ids.setdefault(tuple(row), len(ids)) for row in rows]

    def node_frag(self) -> np.ndarray:
        """``F`` of every node now (read-only view of the memo)."""
        self._refresh()
        view = self._frag.view()
        view.setflags(write=False)
        return view

    def state_ids(self) -> np.ndarray:
        """Per node, an id shared by exactly the nodes in the same F-relevant state."""
        self._refresh()
        view = self._state.view()
        view.setflags(write=False)
        return view

    def after_whole(self, nodes: np.ndarray, pod: Pod) -> np.ndarray:
        """``F`` of ``nodes`` after ``pod`` (CPU-only or k whole GPUs) lands on each."""
        self._refresh()
        c = self.cluster
        taken = pod.num_gpu if pod.is_gpu else 0
        return self.frag(
            c.cpu_free[nodes] - pod.cpu_milli,
            self._cnt[nodes] - taken,
            self._fs[nodes],
            c.gpu_free_total[nodes] - taken * MILLI,
            self.access[nodes],
        )

    def after_share(self, nodes: np.ndarray, free: np.ndarray, pod: Pod) -> np.ndarray:
        """``F`` of ``nodes[i]`` after sharing ``pod`` lands on a GPU with ``free[i]`` free."""
        self._refresh()
        c = self.cluster
        m = self.t_milli[None, :]
        before = free[:, None]
        after = before - pod.gpu_milli
        cnt = self._cnt[nodes] - (before >= m) + (after >= m)
        fs = self._fs[nodes] - np.where(before < m, before, 0) + np.where(after < m, after, 0)
        return self.frag(
            c.cpu_free[nodes] - pod.cpu_milli,
            cnt,
            fs,
            c.gpu_free_total[nodes] - pod.gpu_milli,
            self.access[nodes],
        )


_MODELS: weakref.WeakKeyDictionary[Cluster, dict[TypicalPods, FragModel]] = (
    weakref.WeakKeyDictionary()
)


def frag_model(cluster: Cluster, typical: TypicalPods) -> FragModel:
    """The (memoised) :class:`FragModel` of ``cluster`` against ``typical``."""
    per_cluster = _MODELS.setdefault(cluster, {})
    model = per_cluster.get(typical)
    if model is None:
        model = per_cluster[typical] = FragModel(cluster, typical)
    return model


def cluster_fragmentation(cluster: Cluster, typical: TypicalPods) -> tuple[float, float]:
    """(fragmented GPU milli, its share of all free GPU milli) of the whole cluster."""
    total = float(frag_model(cluster, typical).node_frag().sum())
    free = float(cluster.gpu_free_total.sum())
    return total, (total / free if free > 0 else 0.0)
