"""`kale validate` reads what people are about to apply: several documents, directories, stdin,
and the daemons' own settings files."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kale.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
KUBECTL = shutil.which("kubectl")


def job(name: str, **training) -> dict:
    doc = yaml.safe_load((EXAMPLES / "ctr-sync.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["training"].update(training)
    return doc


def write(path: Path, *docs: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
    return path


def run(
    args: list[str], capsys, stdin: str | None = None, monkeypatch=None
) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(["validate", "--no-file-checks", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_every_document_of_a_multi_document_file_is_checked_and_named(tmp_path, capsys):
    file = write(tmp_path / "jobs.yaml", job("a"), job("b", maxWorkers=0), job("c"))
    code, out, err = run([str(file)], capsys)
    assert code == 2
    assert f"{file} (document 1): ok" in out and f"{file} (document 3): ok" in out
    assert err.startswith(f"{file} (document 2): spec.training.maxWorkers: ")


def test_a_directory_is_every_yaml_file_below_it(tmp_path, capsys):
    write(tmp_path / "jobs" / "a.yaml", job("a"))
    write(tmp_path / "jobs" / "team" / "b.yml", job("b"))
    (tmp_path / "jobs" / "notes.txt").write_text("not yaml")
    write(tmp_path / "jobs" / ".hidden" / "c.yaml", job("c", maxWorkers=0))  # ignored
    code, out, err = run([str(tmp_path / "jobs")], capsys)
    assert code == 0, err
    assert out.count(": ok (ElasticTrainingJob") == 2


def test_an_empty_directory_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, _, err = run([str(tmp_path / "empty")], capsys)
    assert code == 2 and "no *.yaml or *.yml files" in err


def test_standard_input_is_read_with_a_dash(capsys, monkeypatch):
    text = yaml.safe_dump_all([job("a"), job("b", minWorkers=100)])
    code, out, err = run(["-"], capsys, stdin=text, monkeypatch=monkeypatch)
    assert code == 2
    assert "<stdin> (document 1): ok" in out
    assert "<stdin> (document 2): spec.training" in err


def test_controller_and_scheduler_configs_are_validated_as_their_daemons_read_them(
    tmp_path, capsys
):
    good = yaml.safe_load((ROOT / "manifests" / "deployment" / "controller.yaml").read_text())
    bad = {**good, "shards": 4, "leaderElection": {"enabled": False}}
    sched = yaml.safe_load((ROOT / "manifests" / "scheduler" / "scheduler.yaml").read_text())
    file = write(tmp_path / "configs.yaml", good, bad, sched)
    code, out, err = run([str(file)], capsys)
    assert code == 2
    assert f"{file} (document 1): ok (ControllerConfig)" in out
    assert f"{file} (document 3): ok (SchedulerConfig)" in out
    assert f"{file} (document 2): " in err and "leaderElection.enabled" in err


def test_a_configmap_carrying_controller_yaml_has_it_checked(tmp_path, capsys):
    cfg = {"apiVersion": "kale.dev/v1alpha1", "kind": "ControllerConfig", "interval": "-5s"}
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kale-controller-config", "namespace": "kale-system"},
        "data": {"controller.yaml": yaml.safe_dump(cfg), "other.txt": "x"},
    }
    file = write(tmp_path / "cm.yaml", cm)
    code, _, err = run([str(file)], capsys)
    assert code == 2
    assert "ConfigMap kale-system/kale-controller-config, controller.yaml" in err
    assert "interval" in err


def test_other_kinds_are_skipped_but_a_file_with_nothing_of_kales_is_an_error(tmp_path, capsys):
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}}
    mixed = write(tmp_path / "mixed.yaml", deploy, job("a"))
    code, out, _ = run([str(mixed)], capsys)
    assert code == 0 and "1 document of other kinds skipped" in out
    only = write(tmp_path / "deploy.yaml", deploy)
    code, _, err = run([str(only)], capsys)
    assert code == 2 and "no ElasticTrainingJob, ControllerConfig or SchedulerConfig" in err


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) is not installed")
def test_the_rendered_release_validates_from_standard_input(capsys, monkeypatch):
    rendered = subprocess.run(
        [KUBECTL, "kustomize", str(ROOT / "manifests")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    code, out, err = run(["-"], capsys, stdin=rendered, monkeypatch=monkeypatch)
    assert code == 0, err
    assert "ok (ControllerConfig)" in out and "ok (SchedulerConfig)" in out
