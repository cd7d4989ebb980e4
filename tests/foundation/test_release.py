"""A release: one version that everything reads, a changelog in Keep a Changelog's shape, and
the release workflow linted offline (its structure here; the GitHub workflow schema through
check-jsonschema's vendored copy where it is installed).

The wheel itself is built and checked in ``test_dist.py``.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from autoscaler.controller.metrics import ControllerMetrics
from common.version import __version__
from kale.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
CHANGELOG = ROOT / "CHANGELOG.md"
SEMVER = r"\d+\.\d+\.\d+"


def workflow() -> dict:
    doc = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc


def make_variable(name: str) -> str:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    out = subprocess.run(
        [
            make,
            "-s",
            "--no-print-directory",
            f"print-{name}",
            "--eval",
            f"print-{name}: ; @echo $({name})",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    return out.stdout.strip()


def steps(job: str) -> list[dict]:
    return workflow()["jobs"][job]["steps"]


def run_text(job: str) -> str:
    return "\n".join(s.get("run", "") for s in steps(job))


# -- the version ------------------------------------------------------------------------------
def test_the_version_is_written_once_in_common_version():
    assert re.fullmatch(SEMVER, __version__)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "common.version.__version__"


def test_kale_version_prints_it(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"kale, version {__version__}"


def test_the_build_info_metric_labels_it():
    labels = {"version": __version__, "python_version": platform.python_version()}
    assert ControllerMetrics().registry.get_sample_value("kale_build_info", labels) == 1.0


def test_the_makefile_tags_the_images_with_it():
    assert make_variable("VERSION") == __version__


def test_the_workflow_pushes_where_the_makefile_and_the_manifests_say():
    assert workflow()["env"]["IMAGE_REPO"] == make_variable("IMAGE_REPO") == "ghcr.io/kale-dev"
    release = (ROOT / "manifests" / "release.yaml").read_text(encoding="utf-8")
    images = set(re.findall(r"image:\s*(\S+)", release))
    assert images and all(i.startswith("ghcr.io/kale-dev/") for i in images)
    assert {i.rpartition(":")[2] for i in images} == {__version__}


def test_the_install_guide_names_this_version():
    guide = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    tags = set(re.findall(rf"ghcr\.io/kale-dev/kale(?:-trainer)?:({SEMVER})", guide))
    tags |= set(re.findall(rf"releases/download/v({SEMVER})/", guide))
    tags |= set(re.findall(rf"\?ref=v({SEMVER})", guide))
    assert tags == {__version__}


# -- the changelog ----------------------------------------------------------------------------
def test_the_changelog_keeps_a_changelog():
    text = CHANGELOG.read_text(encoding="utf-8")
    assert text.startswith("# Changelog\n")
    heads = re.findall(r"^## (.*)$", text, flags=re.M)
    assert heads[0] == "[Unreleased]"
    versions = []
    for head in heads[1:]:
        m = re.fullmatch(rf"\[({SEMVER})\] - (\d{{4}}-\d{{2}}-\d{{2}})", head)
        assert m, f"a release heading is '## [X.Y.Z] - YYYY-MM-DD', not '## {head}'"
        versions.append(tuple(int(p) for p in m.group(1).split(".")))
    assert versions == sorted(versions, reverse=True), "newest first"
    assert __version__ in {".".join(map(str, v)) for v in versions}  # the version has a section
    kinds = set(re.findall(r"^### (.*)$", text, flags=re.M))
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    for label in ["Unreleased", *(".".join(map(str, v)) for v in versions)]:
        assert re.search(
            rf"^\[{re.escape(label)}\]: https://github\.com/kale-dev/kale/", text, re.M
        )


# -- the release workflow ---------------------------------------------------------------------
def test_the_workflow_runs_on_version_tags_with_read_only_defaults():
    doc = workflow()
    assert doc["on"] == {"push": {"tags": ["v*"]}}
    assert doc["permissions"] == {"contents": "read"}
    jobs = doc["jobs"]
    assert set(jobs) == {"test", "images", "release"}
    assert jobs["images"]["needs"] == "test" and set(jobs["release"]["needs"]) == {"test", "images"}
    assert jobs["images"]["permissions"]["packages"] == "write"
    assert jobs["release"]["permissions"] == {"contents": "write"}
    for name, job in jobs.items():
        assert job["runs-on"] == "ubuntu-latest" and job["timeout-minutes"] > 0, name
        for step in job["steps"]:
            assert ("uses" in step) != ("run" in step), step
            if "uses" in step:  # every action at a released major version (or a commit)
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@(v\d+|[0-9a-f]{40})", step["uses"]), step


def test_the_workflow_tests_and_builds_the_distribution_before_anything_is_pushed():
    text = run_text("test")
    assert "make test" in text.splitlines() and "make dist-check" in text.splitlines()
    upload = [s for s in steps("test") if s.get("uses", "").startswith("actions/upload-artifact")]
    assert upload and upload[0]["with"]["path"] == "dist/"
    assert (
        workflow()["jobs"]["test"]["outputs"]["version"] == "${{ steps.version.outputs.version }}"
    )


def _version_step() -> str:
    (step,) = [s for s in steps("test") if s.get("id") == "version"]
    return step["run"]


@pytest.mark.parametrize(("tag", "ok"), [(f"v{__version__}", True), ("v0.0.0-wrong", False)])
def test_the_workflow_refuses_a_tag_that_is_not_the_version(tag, ok, tmp_path):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    output = tmp_path / "github_output"
    env = {**os.environ, "GITHUB_REF_NAME": tag, "GITHUB_OUTPUT": str(output)}
    done = subprocess.run(
        [bash, "-e", "-c", _version_step()],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )
    assert (done.returncode == 0) is ok, done.stdout + done.stderr
    if ok:
        assert output.read_text(encoding="utf-8") == f"version={__version__}\n"
    else:
        assert f"common/version.py says {__version__}" in done.stdout


def test_the_workflow_builds_and_pushes_the_images_the_makefile_builds():
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    built = dict(
        (name, dockerfile)
        for dockerfile, name in re.findall(
            r"build -f (images/\S+\.Dockerfile) .*-t \$\(IMAGE_REPO\)/([a-z-]+):\$\(VERSION\)", make
        )
    )
    images = workflow()["jobs"]["images"]
    matrix = {i["name"]: i["dockerfile"] for i in images["strategy"]["matrix"]["image"]}
    assert (
        matrix
        == built
        == {"kale": "images/controller.Dockerfile", "kale-trainer": "images/trainer.Dockerfile"}
    )
    uses = [s["uses"].split("@")[0] for s in images["steps"] if "uses" in s]
    assert uses == [
        "actions/checkout",
        "docker/setup-buildx-action",
        "docker/login-action",
        "docker/build-push-action",
    ]
    login, push = images["steps"][2]["with"], images["steps"][3]["with"]
    assert login["registry"] == "ghcr.io" and "GITHUB_TOKEN" in login["password"]
    assert push["push"] is True and push["file"] == "${{ matrix.image.dockerfile }}"
    version = "${{ needs.test.outputs.version }}"
    assert push["tags"] == "${{ env.IMAGE_REPO }}/${{ matrix.image.name }}:" + version
    assert push["build-args"] == f"VERSION={version}"


def test_the_release_attaches_the_manifest_and_the_distribution_with_the_changelog_as_notes(
    tmp_path,
):
    text = run_text("release")
    assert re.search(r"gh release create .*--notes-file notes\.md", text.replace("\\\n", " "))
    assert "manifests/release.yaml dist/*" in text
    download = [s for s in steps("release") if s.get("uses", "").startswith("actions/download")]
    assert download and download[0]["with"] == {"name": "dist", "path": "dist/"}
    # The notes step, run here on the changelog: the version's section and nothing else.
    (notes_step,) = [
        s for s in steps("release") if "notes.md" in s.get("run", "") and "awk" in s["run"]
    ]
    bash = shutil.which("bash")
    if bash is None or shutil.which("awk") is None:
        pytest.skip("bash and awk are needed to run the notes step")
    shutil.copy(CHANGELOG, tmp_path / "CHANGELOG.md")
    subprocess.run(
        [bash, "-e", "-c", notes_step["run"]],
        cwd=tmp_path,
        env={**os.environ, "VERSION": __version__},
        timeout=60,
        check=True,
    )
    notes = (tmp_path / "notes.md").read_text(encoding="utf-8")
    section = CHANGELOG.read_text(encoding="utf-8").split(f"## [{__version__}]", 1)[1]
    assert notes.strip() and notes.strip() in section and "## [" not in notes


def test_the_workflow_matches_the_github_workflow_schema():
    tool = Path(sys.executable).with_name("check-jsonschema")
    if not tool.exists():
        found = shutil.which("check-jsonschema")
        if found is None:
            pytest.skip("check-jsonschema is not installed (pip install 'kale-autoscaler[dev]')")
        tool = Path(found)
    done = subprocess.run(
        [str(tool), "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
