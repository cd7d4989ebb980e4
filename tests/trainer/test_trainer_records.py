"""Pure parts of the trainer: records, the rescale file, the offset ledger, PS math,
checkpoints across a change of PS count. No broker, no processes."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from common.errors import UserError
from trainer import checkpoint
from trainer.config import batch_sizes, validate_shape
from trainer.ledger import OffsetLedger
from trainer.model import forward, init_block
from trainer.ps import ShardState, SyncAccumulator
from trainer.records import (
    CTRTask,
    decode_records,
    encode_record,
    encode_records,
    make_record_factory,
)
from trainer.rescale import (
    RescaleMeasurement,
    ResizeTiming,
    load_rescale_measurement,
    save_rescale_measurement,
)
from trainer.spec import ModelSpec

# ------------------------------------------------------------------------------ records


def test_records_round_trip_ids_and_labels():
    ids = np.array([[0, 1, 2**32 - 1], [7, 8, 9]])
    decoded = decode_records(encode_records(ids, np.array([1, 0])), fields=3)
    assert decoded.ids.tolist() == ids.tolist()
    assert decoded.labels.tolist() == [1.0, 0.0]
    assert decoded.skipped == 0


def test_records_that_are_not_ctr_samples_are_counted_not_trained():
    good = encode_record([1, 2, 3], 1)
    other_width = encode_record([1, 2], 0)
    decoded = decode_records([b'{"seq": 1}', good, other_width, b""], fields=3)
    assert decoded.ids.tolist() == [[1, 2, 3]]
    assert decoded.skipped == 3


def test_record_factory_fits_replay_and_is_deterministic_per_sequence_number():
    a, b = make_record_factory(seed=3), make_record_factory(seed=3)
    first = [a(seq, 1.7e9) for seq in range(5000)]
    assert [b(seq, 0.0) for seq in range(5000)] == first  # same seed, same records
    assert a(4999, 0.0) == first[4999] and a(0, 0.0) == first[0]  # random access works
    assert make_record_factory(seed=4)(0, 0.0) != first[0]
    assert decode_records(first, fields=8).skipped == 0


def test_labels_are_learnable_from_the_ids():
    task = CTRTask(seed=0)
    ids, labels = task.sample(50_000, np.random.default_rng(1))
    p = task.click_probability(ids)
    bayes = -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))
    base = labels.mean()
    constant = -(base * math.log(base) + (1 - base) * math.log(1 - base))
    assert bayes < constant - 0.1  # the ids carry real signal
    assert 0.2 < base < 0.8


# ------------------------------------------------------------------------------ rescale file


def _timing(total: float) -> ResizeTiming:
    return ResizeTiming(
        1, 1, 2, 1, total * 0.1, total * 0.05, total * 0.05, total * 0.1, total * 0.7
    )


def test_rescale_measurement_round_trips_and_loads_its_median(tmp_path):
    m = RescaleMeasurement((_timing(3.0), _timing(5.0), _timing(4.0)), mode="sync")
    path = tmp_path / "rescale.json"
    save_rescale_measurement(m, path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "kale.rescale/v1"
    assert doc["median_s"] == pytest.approx(4.0) and doc["max_s"] == pytest.approx(5.0)
    assert set(doc["phases"]) == {"checkpoint_s", "stop_s", "start_s", "load_s", "stream_rebuild_s"}
    assert doc["samples"][0]["total_s"] == pytest.approx(3.0)
    assert load_rescale_measurement(path) == pytest.approx(4.0)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "file not found"),  # missing file
        ("{not json", "not JSON"),  # syntax error
        ("[1, 2]", "expected a JSON object"),  # wrong shape
        ('{"format": "kale.rescale/v0", "median_s": 1, "max_s": 1}', "format must be"),
        ('{"format": "kale.rescale/v1", "median_s": -1, "max_s": 1}', "positive number"),
        ('{"format": "kale.rescale/v1", "median_s": "4s", "max_s": 5}', "must be a number"),
        ('{"format": "kale.rescale/v1", "median_s": 5, "max_s": 4}', "below median_s"),
    ],
)
def test_a_bad_rescale_file_is_one_user_error_naming_the_file(tmp_path, content, reason):
    path = tmp_path / "rescale.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UserError) as err:
        load_rescale_measurement(path)
    assert str(path) in str(err.value) and reason in str(err.value)
    assert "\n" not in str(err.value)


def test_rescale_loader_does_not_need_torch():
    import subprocess
    import sys

    code = (
        "import sys, trainer.rescale, trainer.records, trainer.spec, trainer.spawn, "
        "trainer.checkpoint; sys.exit('torch' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ------------------------------------------------------------------------------ bookkeeping


def test_offset_ledger_merges_ranges_and_counts_duplicates():
    ledger = OffsetLedger()
    ledger.add(0, 0, 9)
    ledger.add(0, 20, 29)
    ledger.add(0, 10, 19)  # fills the gap
    ledger.add(0, 25, 34)  # 25..29 trained twice
    assert ledger.covered(0) == [(0, 35)]
    assert ledger.duplicates == 5
    assert ledger.total() == 40  # 35 distinct offsets + 5 trained twice


def test_sync_batches_split_the_global_batch_exactly_and_async_batches_do_not():
    assert batch_sizes("sync", 4096, 3) == [1366, 1365, 1365]
    assert sum(batch_sizes("sync", 4096, 3)) == 4096
    assert batch_sizes("async", 512, 3) == [512, 512, 512]


@pytest.mark.parametrize(
    ("mode", "batch", "workers", "ps", "reason"),
    [
        ("sync", 256, 0, 1, "at least 1"),  # no workers
        ("sync", 256, 2, 0, "at least 1"),  # no PS
        ("sync", 256, 2, 12, "parameter blocks"),  # more PS than blocks
        ("sync", 2, 3, 1, "smaller than workers"),  # a sync worker without a sample
    ],
)
def test_impossible_shapes_are_user_errors(mode, batch, workers, ps, reason):
    with pytest.raises(UserError, match=reason):
        validate_shape(ModelSpec(), mode, batch, workers, ps)


# ------------------------------------------------------------------------------ PS math


def _grads(spec: ModelSpec, state: ShardState, ids: np.ndarray, labels: np.ndarray):
    """Gradients of the summed loss w.r.t. the pulled rows and dense layers."""
    t = torch.from_numpy(ids)
    uniq, inverse = zip(
        *(torch.unique(t[:, f], return_inverse=True) for f in range(3)), strict=True
    )
    flat = state.gather(list(uniq))
    rows, dense = state.split(list(uniq), flat)
    rows = [r.clone().requires_grad_(True) for r in rows]
    dense = [d.clone().requires_grad_(True) for d in dense]
    logits = forward(spec, rows, torch.stack(inverse, dim=1), dense)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, torch.from_numpy(labels), reduction="sum"
    )
    loss.backward()
    return list(uniq), [r.grad for r in rows], [d.grad for d in dense]


def test_a_sync_step_over_two_workers_equals_one_step_over_their_joint_batch():
    spec = ModelSpec(fields=3, rows=50, dim=4, hidden=(8,))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, size=(40, 3))
    labels = rng.integers(0, 2, size=40).astype(np.float32)
    split = ShardState(spec, 0, 1)
    joint = ShardState(spec, 0, 1)
    acc = SyncAccumulator(split)
    for part in (slice(0, 15), slice(15, 40)):
        acc.add(*_grads(spec, split, ids[part], labels[part]), count=len(ids[part]), stop=False)
    acc.apply()
    uniq, rows, dense = _grads(spec, joint, ids, labels)
    joint.apply(uniq, rows, dense, count=40)
    for idx in split.slots:
        assert torch.allclose(split.slots[idx].param, joint.slots[idx].param, atol=1e-6)
        assert not torch.equal(split.slots[idx].param, init_block(spec, split.slots[idx].block))


def test_a_checkpoint_written_by_two_ps_restores_into_three(tmp_path):
    spec = ModelSpec(fields=4, rows=20, dim=2, hidden=(4,))
    old = [ShardState(spec, i, 2) for i in range(2)]
    blocks: dict[int, str] = {}
    for i, state in enumerate(old):
        for slot in state.slots.values():
            slot.param.add_(float(slot.block.index + 1))  # make every block recognisable
        path = tmp_path / f"shard-x-{i}.pt"
        checkpoint.save_shard(state, path)
        blocks.update({b.index: str(path) for b in state.blocks})
    checkpoint.write_manifest(tmp_path, spec=spec.to_dict(), blocks=blocks, info={"samples": 1})
    plan = checkpoint.plan_from_manifest(tmp_path, spec.to_dict())
    new = [ShardState(spec, i, 3) for i in range(3)]
    for state in new:
        checkpoint.restore(state, plan)
    saved = {idx: s.param for state in old for idx, s in state.slots.items()}
    restored = {idx: s.param for state in new for idx, s in state.slots.items()}
    assert saved.keys() == restored.keys()
    for idx in saved:
        assert torch.equal(saved[idx], restored[idx])
    with pytest.raises(checkpoint.CheckpointError, match="different model"):
        checkpoint.plan_from_manifest(tmp_path, ModelSpec().to_dict())
