"""Synthetic CTR samples on the wire: a compact binary record and a learnable generator.

Why this module exists: the trainer must learn from the stream, not from a file, so the
stream has to carry real training data: a sample is one record (one impression: a few
categorical feature ids and a click label), so the meter's records/s are the trainer's
samples/s. ``kale replay`` produces such records through :func:`make_record_factory`.

Record layout (little-endian, ``4 + 4·F`` bytes)::

    byte 0  b"K"           magic
    byte 1  1              format version
    byte 2  label          0 or 1
    byte 3  F              number of fields
    4..     F × uint32     feature ids, one per field

Labels are *learnable*: every (field, id) has a hidden weight drawn once from the seed, and
``P(click) = sigmoid(bias + Σ_f weight[f, id_f])``. Ids follow a Zipf law per field (hot
ids recur, as in real click logs), so a model sees the head ids often enough to learn them
within a few hundred steps and its loss falls visibly below ln 2.

numpy only: imported by ``kale replay`` and the profiler's feeder, which never need torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

MAGIC = ord("K")
VERSION = 1
HEADER_BYTES = 4


def record_size(fields: int) -> int:
    """Bytes of one encoded record with ``fields`` feature ids."""
    return HEADER_BYTES + 4 * fields


def encode_records(ids: np.ndarray, labels: np.ndarray) -> list[bytes]:
    """Encode ``ids`` (n × F, non-negative, < 2³²) and ``labels`` (n, 0/1) as records."""
    ids = np.asarray(ids)
    labels = np.asarray(labels)
    if ids.ndim != 2 or labels.shape != (ids.shape[0],):
        raise ValueError(f"ids must be n × F and labels n long, got {ids.shape} and {labels.shape}")
    n, fields = ids.shape
    if not 1 <= fields <= 255:
        raise ValueError(f"a record holds 1 to 255 fields, got {fields}")
    if n and (ids.min() < 0 or ids.max() >= 2**32):
        raise ValueError("feature ids must be in [0, 2**32)")
    out = np.empty((n, record_size(fields)), dtype=np.uint8)
    out[:, 0] = MAGIC
    out[:, 1] = VERSION
    out[:, 2] = (np.asarray(labels) > 0).astype(np.uint8)
    out[:, 3] = fields
    out[:, HEADER_BYTES:] = ids.astype("<u4").view(np.uint8).reshape(n, 4 * fields)
    return [row.tobytes() for row in out]


def encode_record(ids: Sequence[int], label: int) -> bytes:
    """Encode one sample."""
    return encode_records(np.asarray([list(ids)], dtype=np.int64), np.asarray([label]))[0]


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """Samples decoded from records; records that are not CTR samples are only counted."""

    ids: np.ndarray
    """n × F feature ids (int64)."""
    labels: np.ndarray
    """n labels (float32, 0.0 or 1.0)."""
    skipped: int
    """Records that were not CTR samples with F fields (consumed, never trained)."""


def decode_records(values: Sequence[bytes], fields: int) -> DecodedBatch:
    """Decode record values; anything that is not a version-1 record with ``fields`` ids is
    skipped (counted), so a topic carrying other payloads never crashes a worker."""
    size = record_size(fields)
    good = [v for v in values if len(v) == size and v[0] == MAGIC and v[1] == VERSION]
    good = [v for v in good if v[3] == fields]
    n = len(good)
    if n == 0:
        return DecodedBatch(
            np.zeros((0, fields), dtype=np.int64), np.zeros(0, dtype=np.float32), len(values)
        )
    raw = np.frombuffer(b"".join(good), dtype=np.uint8).reshape(n, size)
    ids = raw[:, HEADER_BYTES:].copy().view("<u4").reshape(n, fields).astype(np.int64)
    labels = (raw[:, 2] > 0).astype(np.float32)
    return DecodedBatch(ids, labels, len(values) - n)


@dataclass(frozen=True)
class CTRTask:
    """The hidden click model that synthetic samples are drawn from."""

    fields: int = 8
    """Categorical fields per sample."""
    vocab: int = 10_000
    """Distinct ids per field (ids are in [0, vocab))."""
    zipf: float = 1.1
    """Zipf exponent of the id popularity (higher: a hotter head)."""
    weight_scale: float = 0.8
    """Standard deviation of the hidden per-id weights (signal strength)."""
    bias: float = -0.5
    """Hidden logit bias (sets the base click rate)."""
    seed: int = 0
    """Seed of the hidden weights and the id permutations."""
    _weights: np.ndarray = field(init=False, repr=False, compare=False)
    _cdf: np.ndarray = field(init=False, repr=False, compare=False)
    _perm: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.fields < 1 or self.vocab < 2:
            raise ValueError(f"need fields >= 1 and vocab >= 2, got {self.fields}, {self.vocab}")
        rng = np.random.default_rng(self.seed)
        weights = rng.normal(0.0, self.weight_scale, size=(self.fields, self.vocab))
        pmf = 1.0 / np.arange(1, self.vocab + 1) ** self.zipf
        cdf = np.cumsum(pmf / pmf.sum())
        cdf[-1] = 1.0
        # Each field's hot ids are different ids (a permutation per field).
        perm = np.stack([rng.permutation(self.vocab) for _ in range(self.fields)])
        object.__setattr__(self, "_weights", weights)
        object.__setattr__(self, "_cdf", cdf)
        object.__setattr__(self, "_perm", perm)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` samples: ids (n × F int64) and labels (n, float32)."""
        ranks = np.searchsorted(self._cdf, rng.random((n, self.fields)), side="right")
        ranks = np.minimum(ranks, self.vocab - 1)
        ids = self._perm[np.arange(self.fields), ranks]
        labels = (rng.random(n) < self.click_probability(ids)).astype(np.float32)
        return ids.astype(np.int64), labels

    def click_probability(self, ids: np.ndarray) -> np.ndarray:
        """The hidden P(click | ids) (what a perfect model would predict)."""
        logit = self.bias + self._weights[np.arange(self.fields), np.asarray(ids) % self.vocab].sum(
            axis=1
        )
        return 1.0 / (1.0 + np.exp(-logit))

    def records(self, n: int, rng: np.random.Generator) -> list[bytes]:
        """``n`` encoded records."""
        ids, labels = self.sample(n, rng)
        return encode_records(ids, labels)


class CTRRecordFactory:
    """A ``kale replay`` record factory: record ``seq`` is a deterministic function of the
    seed and ``seq``, generated in chunks so one call costs well under a microsecond."""

    def __init__(self, task: CTRTask, *, chunk: int = 4096) -> None:
        if chunk < 1:
            raise ValueError(f"chunk must be positive, got {chunk}")
        self.task = task
        self.chunk = chunk
        self._index = -1
        self._records: list[bytes] = []

    def __call__(self, seq: int, event_time: float = 0.0) -> bytes:
        index, within = divmod(int(seq), self.chunk)
        if index != self._index:
            rng = np.random.default_rng([self.task.seed, 1, index])
            self._records = self.task.records(self.chunk, rng)
            self._index = index
        return self._records[within]


def make_record_factory(seed: int = 0, *, fields: int = 8, vocab: int = 10_000) -> CTRRecordFactory:
    """A record factory for ``replay(..., record_factory=...)`` producing CTR samples."""
    return CTRRecordFactory(CTRTask(fields=fields, vocab=vocab, seed=seed))
