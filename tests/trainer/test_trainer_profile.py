"""``kale profile`` measures a real trainer on a real stream; its CSV fits with ``kale
throughput fit`` and its rescale JSON is what ``rescale: {duration: auto}`` reads."""

from __future__ import annotations

import json

import pytest

from kale.cli.main import main
from throughput.profile import load_profile
from trainer.rescale import load_rescale_measurement, read_rescale_json

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_profile_writes_a_csv_that_fits_and_a_rescale_measurement(
    kafka_broker, unique_name, job_file, tmp_path, capsys
):
    job = job_file(
        bootstrap=kafka_broker.bootstrap,
        topic=unique_name("clicks"),
        group=unique_name("group"),
        globalBatchSize=256,
        workersPerPS=4,
    )
    csv, rescale = tmp_path / "profile.csv", tmp_path / "rescale.json"
    code = main(
        [
            "profile",
            "--job",
            str(job),
            "--workers",
            "1,2,3",
            "--ps",
            "1",
            "--seconds",
            "2",
            "--warmup",
            "0.5",
            "--rescales",
            "2",
            "--bootstrap",
            kafka_broker.bootstrap,
            "-o",
            str(csv),
            "--rescale-out",
            str(rescale),
            "--json",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    result = json.loads(out)

    # The CSV is what the worker estimator reads: one row per configuration, mode included.
    profile = load_profile(csv)
    assert sorted(zip(profile.workers.tolist(), profile.ps.tolist(), strict=True)) == [
        (1, 1),
        (2, 1),
        (3, 1),
    ]
    assert set(profile.modes) == {"sync"}
    assert all(t > 100 for t in profile.throughput)
    assert [r["workers"] for r in result["rows"]] == [1, 2, 3]
    assert all(r["steps"] > 0 and r["loss"] < 0.75 for r in result["rows"])

    # Three configurations on the w/p = 4 ratio are enough for the fixed-ratio family
    # (3 coefficients); the general family would need 6 distinct configurations.
    model = tmp_path / "model.json"
    code = main(
        [
            "throughput",
            "fit",
            "--profile",
            str(csv),
            "--mode",
            "sync",
            "--ratio",
            "4",
            "--global-batch",
            "256",
            "--family",
            "fixed-ratio",
            "-o",
            str(model),
            "--json",
        ]
    )
    fit = capsys.readouterr().out
    assert code == 0, fit
    assert json.loads(fit)["family"] == "fixed-ratio"
    assert model.is_file()

    # The rescale file: median and max of several resizes, each phase timed.
    doc = read_rescale_json(rescale)
    assert len(doc["samples"]) >= 2
    assert 0 < doc["median_s"] <= doc["max_s"] < 60
    assert load_rescale_measurement(rescale) == pytest.approx(doc["median_s"])
    for sample in doc["samples"]:
        phases = [sample[k] for k in doc["phases"]]
        assert sample["total_s"] == pytest.approx(sum(phases))
    assert result["rescale"]["median_s"] == pytest.approx(doc["median_s"])
