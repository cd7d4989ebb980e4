"""``kale throughput``: the JSON contract of every subcommand and the exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kale.cli.main import main

KALE = Path(sys.executable).parent / "kale"
# Only a guard against a hang: start-up (numpy, scipy) can take a minute on a loaded machine.
SUBPROCESS_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated sync profile and its fitted model, shared by the read-only tests."""
    d = tmp_path_factory.mktemp("kale-throughput")
    assert (
        main(["throughput", "generate", "--mode", "sync", "--seed", "1", "-o", str(d / "p.csv")])
        == 0
    )
    assert (
        main(
            [
                "throughput",
                "fit",
                "--profile",
                str(d / "p.csv"),
                "--mode",
                "sync",
                "-o",
                str(d / "m.json"),
            ]
        )
        == 0
    )
    return d


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> object:
    capsys.readouterr()
    rc = main(argv)
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run argv, expect exit code 2 and exactly one line on stderr; return that line."""
    capsys.readouterr()
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == 2, captured
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    return lines[0]


def test_fit_json_has_the_contract_fields(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _json(
        capsys,
        [
            "throughput",
            "fit",
            "--profile",
            str(workdir / "p.csv"),
            "--mode",
            "sync",
            "--ratio",
            "4",
            "--family",
            "auto",
            "-o",
            str(workdir / "m2.json"),
            "--json",
        ],
    )
    assert isinstance(out, dict)
    assert {"family", "theta", "mape", "cv_mape", "r2", "peak_workers", "peak_throughput"} <= set(
        out
    )
    assert out["family"] in ("general", "fixed-ratio")
    assert 30 <= out["peak_workers"] <= 60
    assert json.loads((workdir / "m2.json").read_text())["format"] == "kale.throughput/v1"


def test_predict_json_keeps_input_order(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pts = workdir / "pts.csv"
    pts.write_text("workers,ps\n40,10\n1,1\n8,4\n")
    out = _json(
        capsys,
        [
            "throughput",
            "predict",
            "--model",
            str(workdir / "m.json"),
            "--points",
            str(pts),
            "--json",
        ],
    )
    assert isinstance(out, list)
    assert [(r["workers"], r["ps"]) for r in out] == [(40, 10), (1, 1), (8, 4)]
    assert all(set(r) == {"workers", "ps", "throughput"} for r in out)
    assert out[0]["throughput"] > out[2]["throughput"] > out[1]["throughput"] > 0


def test_plan_json_shape_and_saturation(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = str(workdir / "m.json")
    small = _json(capsys, ["throughput", "plan", "--model", model, "--load", "50000", "--json"])
    assert isinstance(small, dict)
    assert {"workers", "ps", "throughput", "saturated"} <= set(small)
    assert small["saturated"] is False and small["throughput"] > 50000
    assert small["ps"] == -(-small["workers"] // 4)
    huge = _json(capsys, ["throughput", "plan", "--model", model, "--load", "1e9", "--json"])
    assert isinstance(huge, dict) and huge["saturated"] is True


def test_plan_with_backlog_sizes_for_load_plus_drain(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = str(workdir / "m.json")
    out = _json(
        capsys,
        [
            "throughput",
            "plan",
            "--model",
            model,
            "--load",
            "50000",
            "--backlog",
            "6000000",
            "--drain-within",
            "5m",
            "--json",
        ],
    )
    plain = _json(capsys, ["throughput", "plan", "--model", model, "--load", "70000", "--json"])
    assert isinstance(out, dict) and isinstance(plain, dict)
    assert out["needed_rate"] == 70000
    assert out["workers"] == plain["workers"]


def test_compare_lists_every_family_with_its_cv_mape(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _json(
        capsys,
        ["throughput", "compare", "--profile", str(workdir / "p.csv"), "--mode", "sync", "--json"],
    )
    assert isinstance(out, dict)
    families = out["families"]
    assert set(families) == {"general", "fixed-ratio", "linear", "optimus"}
    assert all(isinstance(row["cv_mape"], float) for row in families.values())
    assert families["linear"]["cv_mape"] > 10 * families[out["best"]]["cv_mape"]


def test_plot_writes_an_image(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = workdir / "fit.png"
    rc = main(
        [
            "throughput",
            "plot",
            "--model",
            str(workdir / "m.json"),
            "--profile",
            str(workdir / "p.csv"),
            "-o",
            str(png),
        ]
    )
    assert rc == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_human_output_is_a_short_summary(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["throughput", "plan", "--model", str(workdir / "m.json"), "--load", "1e9"]) == 0
    out = capsys.readouterr().out
    assert "SATURATED" in out and len(out.splitlines()) == 1


def test_extrapolation_is_one_warning_line_not_an_error(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pts = workdir / "far.csv"
    pts.write_text("workers,ps\n500,125\n600,150\n")
    capsys.readouterr()
    rc = main(["throughput", "predict", "--model", str(workdir / "m.json"), "--points", str(pts)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 0
    assert len(err) == 1 and err[0].startswith("kale: warning: predicting at")


# (argv after "throughput", text the single error line must contain); {d} is the work dir
BAD_INVOCATIONS = [
    # the profile does not exist
    (["fit", "--profile", "{d}/nope.csv", "--mode", "sync"], "nope.csv: no such file"),
    # a bad row: FILE:LINE: reason
    (["fit", "--profile", "{d}/bad.csv", "--mode", "sync"], "bad.csv:3: ps must be a positive"),
    # a profile with only async rows fitted as sync
    (["fit", "--profile", "{d}/async.csv", "--mode", "sync"], "no rows with mode=sync"),
    # too few configurations for the family asked for
    (["fit", "--profile", "{d}/tiny.csv", "--mode", "sync", "--family", "general"], "at least 6"),
    # the model file is not JSON
    (["plan", "--model", "{d}/bad.json", "--load", "1"], "bad.json:1: not valid JSON"),
    # the model file does not exist
    (["plan", "--model", "{d}/none.json", "--load", "1"], "none.json: no such file"),
    # a negative load
    (["plan", "--model", "{d}/m.json", "--load", "-5"], "--load"),
    # a backlog without a time budget
    (["plan", "--model", "{d}/m.json", "--load", "1", "--backlog", "9"], "--drain-within"),
    # a duration nobody can parse
    (
        ["plan", "--model", "{d}/m.json", "--load", "1", "--backlog", "9", "--drain-within", "5x"],
        "--drain-within",
    ),
    # an inverted range
    (
        [
            "plan",
            "--model",
            "{d}/m.json",
            "--load",
            "1",
            "--min-workers",
            "9",
            "--max-workers",
            "3",
        ],
        "--min-workers (9) is above --max-workers (3)",
    ),
    # points with a bad row
    (["predict", "--model", "{d}/m.json", "--points", "{d}/bad.csv"], "unknown column"),
    # an unknown family
    (["fit", "--profile", "{d}/p.csv", "--mode", "sync", "--family", "cubic"], "--family"),
]


@pytest.mark.parametrize(("argv", "fragment"), BAD_INVOCATIONS)
def test_user_mistakes_exit_2_with_one_line(
    workdir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    (workdir / "bad.csv").write_text("workers,ps,throughput\n1,1,10\n2,0,20\n")
    (workdir / "async.csv").write_text("workers,ps,throughput,mode\n1,1,10,async\n")
    (workdir / "tiny.csv").write_text("workers,ps,throughput\n1,1,10\n2,1,19\n")
    (workdir / "bad.json").write_text("{oops")
    line = _fails(capsys, ["throughput", *[a.format(d=workdir) for a in argv]])
    assert line.startswith("kale: error: ")
    assert fragment in line


def test_installed_entry_point_exits_2_with_one_line(tmp_path: Path) -> None:
    if not KALE.exists():
        pytest.skip("kale console script not installed in this interpreter's environment")
    bad = tmp_path / "p.csv"
    bad.write_text("workers,ps,throughput\n0,1,5\n")
    proc = subprocess.run(
        [str(KALE), "throughput", "fit", "--profile", str(bad), "--mode", "sync"],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip() == f"kale: error: {bad}:2: workers must be a positive integer, got '0'"
    )
