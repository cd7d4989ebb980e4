"""Training on the embedded broker: the loss falls, offsets are committed exactly, and a
stopped job leaves a checkpoint the next start restores."""

from __future__ import annotations

import pytest

from trainer.config import TrainerConfig
from trainer.launcher import Trainer

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SAMPLES = 16_000
BATCH = 256


def _loss_fell(trainer: Trainer) -> tuple[float, float]:
    """Mean loss over the first and the last fifth of the trained samples."""
    steps = [s for s in trainer.steps if s.samples]
    total = sum(s.samples for s in steps)
    head, tail, seen = [], [], 0
    for s in steps:
        if seen < total / 5:
            head.append(s)
        elif seen >= total * 4 / 5:
            tail.append(s)
        seen += s.samples

    def mean(rows):
        return sum(s.loss_sum for s in rows) / sum(s.samples for s in rows)

    return mean(head), mean(tail)


@pytest.mark.parametrize(("mode", "ps"), [("sync", 1), ("async", 2)])
def test_training_lowers_the_loss_and_commits_every_trained_offset(
    kafka_broker, ctr_topic, unique_name, committed, tmp_path, mode, ps
):
    topic, produced = ctr_topic(SAMPLES, partitions=4)
    group = unique_name("group")
    config = TrainerConfig(
        bootstrap=kafka_broker.bootstrap,
        topic=topic,
        group=group,
        mode=mode,
        global_batch=BATCH,
        checkpoint_dir=tmp_path / "ckpt",
    )
    with Trainer(config, workers=2, ps=ps) as trainer:
        trainer.start()
        trainer.wait_for(
            lambda: all(trainer.ledger.covered(p) == [(0, n)] for p, n in produced.items()),
            timeout=120,
            what="every produced record to be trained",
        )
        down = trainer.stop()

    first, last = _loss_fell(trainer)
    assert last < first - 0.03, f"loss did not fall: {first:.3f} -> {last:.3f}"
    # Every produced record was trained and committed, per partition, without gaps.
    assert committed(kafka_broker.bootstrap, group, topic) == produced
    for p, n in produced.items():
        assert trainer.ledger.covered(p) == [(0, n)]
    # Records are trained twice only if a commit failed during the group's first rebalance.
    assert trainer.samples_total - SAMPLES == trainer.ledger.duplicates <= 2 * BATCH
    assert down.manifest is not None and down.manifest.is_file()

    # A new start (other shape, same folder) restores that checkpoint.
    with Trainer(config, workers=1, ps=2) as again:
        assert again.start(wait_consuming=False).restored
