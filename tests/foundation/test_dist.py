"""``make dist``'s wheel and sdist: what they hold, and that the wheel runs where the source
tree is not.

The build is offline (``--no-isolation``: this environment's setuptools, no index) and takes
seconds. The wheel is then installed without its dependencies into a fresh virtual
environment that borrows this one's installed packages, and run from a folder outside the
checkout: ``kale --version``, the dashboard's files and the demo's message come from the
installed files alone. A full install that fetches the core dependencies (no torch) is
``make dist-check``: it downloads hundreds of megabytes, too slow for the test suite.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from common.version import __version__

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("kale", "scheduler", "trainer", "autoscaler", "kube", "forecasting", "throughput")
PACKAGES += ("placement", "common")
NOT_SHIPPED = ("tests", "benchmarks", "experiments", "tools", "examples", "docs", "manifests")
WHEEL = f"kale_autoscaler-{__version__}-py3-none-any.whl"
SDIST = f"kale_autoscaler-{__version__}.tar.gz"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("build") is None:
        pytest.skip("build is not installed (pip install 'kale-autoscaler[dev]')")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == sorted([WHEEL, SDIST])
    return out


def package_files() -> set[str]:
    """Every file of the packages that git keeps or would keep: what the wheel must carry."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", *PACKAGES],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    ).stdout
    return {p for p in listed.split("\0") if p and (ROOT / p).is_file()}


def test_the_wheel_holds_the_packages_their_data_and_the_entry_point(dist):
    with zipfile.ZipFile(dist / WHEEL) as whl:
        names = set(whl.namelist())
        info = f"kale_autoscaler-{__version__}.dist-info"
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
        metadata = whl.read(f"{info}/METADATA").decode()
    shipped = {n for n in names if not n.startswith(info + "/")}
    assert shipped == package_files()  # every module and data file, nothing else
    assert {n.split("/")[0] for n in shipped} == set(PACKAGES)
    assert not {n for n in names if n.split("/")[0] in NOT_SHIPPED}
    static = {n for n in shipped if n.startswith("kale/dashboard/static/")}
    assert {"index.html", "app.js", "style.css"} <= {n.rsplit("/", 1)[1] for n in static}
    assert "[console_scripts]\nkale = kale.cli.main:main" in entry_points
    assert f"\nVersion: {__version__}\n" in metadata
    core = [ln for ln in metadata.splitlines() if ln.startswith("Requires-Dist:")]
    core = [ln for ln in core if "extra ==" not in ln]
    assert core and not [ln for ln in core if "torch" in ln or "numba" in ln], core


def test_the_sdist_holds_the_packages_the_build_files_and_the_changelog(dist):
    top = f"kale_autoscaler-{__version__}/"
    with tarfile.open(dist / SDIST) as sdist:
        names = {m.name.removeprefix(top) for m in sdist.getmembers() if m.isfile()}
    assert {"pyproject.toml", "README.md", "CHANGELOG.md", "PKG-INFO"} <= names
    assert package_files() <= names
    assert not {n for n in names if n.split("/")[0] in NOT_SHIPPED}


def test_the_installed_wheel_runs_without_the_checkout(dist, tmp_path):
    venv = tmp_path / "venv"
    # Nothing of the checkout may be seen: not PYTHONPATH, not the build's egg-info in it.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "install", "-q", "--no-deps", "--no-index", "--ignore-installed", str(dist / WHEEL)],
        check=True,
        timeout=300,
        cwd=elsewhere,
        env=env,
    )
    # The dependencies are this environment's, appended after the venv's own packages (a
    # path in a .pth file; this environment's .pth files, and so a development install of
    # Kale itself, are not read).
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    borrowed = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "borrowed.pth").write_text("\n".join(sorted(borrowed)) + "\n", encoding="utf-8")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), capture_output=True, text=True, cwd=elsewhere, env=env, timeout=120
        )

    shown = run(str(venv / "bin" / "kale"), "--version")
    assert (shown.returncode, shown.stdout) == (0, f"kale, version {__version__}\n"), shown.stderr
    where = run(
        str(python),
        "-c",
        "import kale, common.numbers; from kale.dashboard.app import STATIC;"
        "print(kale.__file__); print(all((STATIC / f).is_file() for f in "
        "('index.html', 'app.js', 'style.css')))",
    )
    assert where.returncode == 0, where.stderr
    module, static = where.stdout.split()
    assert Path(module).is_relative_to(venv) and static == "True"  # the wheel's, not ours
    demo = run(str(venv / "bin" / "kale"), "demo", "--sim-only", "--out", str(tmp_path / "o"))
    assert demo.returncode == 2, demo.stderr
    assert demo.stderr.startswith("kale: error: kale demo needs a source checkout:"), demo.stderr
