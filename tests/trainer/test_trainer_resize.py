"""Resizing mid-stream (2 → 3 workers): no sample lost, at most one in-flight batch per worker
trained twice, the model carried over, every phase timed."""

from __future__ import annotations

import pytest

from trainer.config import TrainerConfig
from trainer.launcher import Trainer

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

BATCH = 256
PARTITIONS = 6


def test_resizing_two_to_three_workers_mid_stream_loses_no_sample(
    kafka_broker, ctr_topic, produce, unique_name, committed, tmp_path
):
    topic, before = ctr_topic(12_000, partitions=PARTITIONS)
    group = unique_name("group")
    config = TrainerConfig(
        bootstrap=kafka_broker.bootstrap,
        topic=topic,
        group=group,
        mode="sync",
        global_batch=BATCH,
        checkpoint_dir=tmp_path / "ckpt",
    )
    with Trainer(config, workers=2, ps=1) as trainer:
        trainer.start()
        trainer.wait_samples(4_000, timeout=90)  # mid-stream: most records still unread
        timing = trainer.resize(3, 1)
        # The stream goes on: more records arrive after the resize.
        after = produce(kafka_broker.bootstrap, topic, 6_000, partitions=PARTITIONS, seed=1)
        total = {p: before[p] + after[p] for p in before}
        produced = sum(total.values())
        trainer.wait_for(
            lambda: all(trainer.ledger.covered(p) == [(0, n)] for p, n in total.items()),
            timeout=90,
            what="every produced record to be trained",
        )
        trainer.stop()

    # No sample lost: per partition, the trained offsets cover [0, produced) without a gap,
    # and the group's committed offset is the partition's end.
    assert committed(kafka_broker.bootstrap, group, topic) == total
    for p, n in total.items():
        assert trainer.ledger.covered(p) == [(0, n)], f"partition {p}"
    # Trained twice: at most one in-flight batch per worker (2 before, 3 after the resize).
    assert trainer.samples_total == produced + trainer.ledger.duplicates
    assert trainer.ledger.duplicates <= (2 + 3) * BATCH

    # The resize restored the model instead of starting over: the first steps after it are
    # about as good as the last ones before it, and clearly better than the untrained start.
    def loss(rows):
        return sum(s.loss_sum for s in rows) / sum(s.samples for s in rows)

    first = [s for s in trainer.steps if s.generation == 1 and s.samples]
    restarted = [s for s in trainer.steps if s.generation == 2 and s.samples]
    untrained, before_resize = loss(first[:4]), loss(first[-4:])
    after_resize = loss(restarted[:6])
    assert after_resize < untrained - 0.03
    assert after_resize < before_resize + 0.05
    assert {s.worker for s in restarted} == {0, 1, 2}

    # Every phase was timed, and the phases add up to the total.
    phases = (
        timing.stop_s,
        timing.checkpoint_s,
        timing.start_s,
        timing.load_s,
        timing.stream_rebuild_s,
    )
    assert all(x >= 0 for x in phases)
    assert timing.total_s == pytest.approx(sum(phases))
    assert (timing.from_workers, timing.to_workers) == (2, 3)
    assert 0 < timing.total_s < 60
