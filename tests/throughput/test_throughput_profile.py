"""Profile and points CSV loading: every mistake names FILE:LINE and the reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from throughput.errors import ProfileError
from throughput.profile import Profile, load_points, load_profile, save_profile

# (name, file bytes or None for "no file", expected fragment of the message after FILE)
FAILURES = [
    # the file is not there at all
    ("missing-file", None, ": no such file"),
    # nothing in it
    ("empty-file", b"", ":1: empty file; expected a header line"),
    # only blank lines and comments: still no header
    ("only-comments", b"\n# just a note\n\n", ":1: empty file"),
    # a header and no measurements
    ("header-only", b"workers,ps,throughput\n", ":1: no data rows after the header"),
    # the ps column is missing from the header
    ("missing-column", b"workers,throughput\n1,100\n", ":1: missing column 'ps'"),
    # a typo in a column name is reported as the unknown column, not as a missing one later
    ("unknown-column", b"worker,ps,throughput\n1,1,100\n", ":1: unknown column 'worker'"),
    # the same column twice would make one of them silently win
    ("duplicate-column", b"workers,ps,ps,throughput\n1,1,1,9\n", ":1: column 'ps' appears twice"),
    # zero workers is not a configuration
    ("zero-workers", b"workers,ps,throughput\n0,1,100\n", ":2: workers must be a positive integer"),
    # negative ps
    ("negative-ps", b"workers,ps,throughput\n4,-1,100\n", ":2: ps must be a positive integer"),
    # half a worker
    ("fractional-workers", b"workers,ps,throughput\n2.5,1,100\n", ":2: workers must be a positive"),
    # not a number at all
    ("text-workers", b"workers,ps,throughput\nfour,1,100\n", ":2: workers must be a positive"),
    # an empty cell
    ("empty-ps", b"workers,ps,throughput\n4,,100\n", ":2: ps is empty"),
    # a zero throughput cannot be a measurement
    ("zero-throughput", b"workers,ps,throughput\n4,1,0\n", ":2: throughput must be positive"),
    # negative throughput
    ("negative-throughput", b"workers,ps,throughput\n4,1,-5\n", ":2: throughput must be positive"),
    # NaN from a failed measurement script
    ("nan-throughput", b"workers,ps,throughput\n4,1,nan\n", ":2: throughput must be finite"),
    # inf
    ("inf-throughput", b"workers,ps,throughput\n4,1,inf\n", ":2: throughput must be finite"),
    # a word where a number belongs
    ("text-throughput", b"workers,ps,throughput\n4,1,fast\n", ":2: throughput must be a number"),
    # a short row
    ("short-row", b"workers,ps,throughput\n1,1,100\n2,1\n", ":3: expected 3 fields"),
    # a long row
    ("long-row", b"workers,ps,throughput\n1,1,100,7\n", ":2: expected 3 fields"),
    # modes other than sync/async
    ("bad-mode", b"workers,ps,throughput,mode\n1,1,100,both\n", ":2: mode must be 'sync' or"),
    # the line number counts comments and blank lines, so it matches the editor
    ("line-after-comments", b"# profile\nworkers,ps,throughput\n\n1,1,100\n0,1,5\n", ":5: workers"),
    # binary junk
    ("not-utf8", b"workers,ps,throughput\n1,1,\xff\xfe\n", ": not a UTF-8 text file"),
]

SUCCESSES = [
    # the minimal shape
    ("minimal", b"workers,ps,throughput\n1,1,100.5\n", [1], [1], [100.5]),
    # any column order, mode column, repeats, comments, blanks, spaces, a BOM, CRLF
    (
        "everything-optional",
        b"\xef\xbb\xbf# measured 2024-05-01\r\n throughput , mode, PS ,workers\r\n\r\n"
        b"100,sync,1,1\r\n110,sync,1,1\r\n380, ,2,4\r\n",
        [1, 1, 4],
        [1, 1, 2],
        [100.0, 110.0, 380.0],
    ),
    # integral floats from spreadsheet exports are whole numbers
    ("integral-floats", b"workers,ps,throughput\n4.0,1.0,99\n", [4], [1], [99.0]),
]


@pytest.mark.parametrize(("name", "content", "fragment"), FAILURES, ids=[f[0] for f in FAILURES])
def test_bad_profile_names_file_line_and_reason(
    tmp_path: Path, name: str, content: bytes | None, fragment: str
) -> None:
    path = tmp_path / f"{name}.csv"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert fragment in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("name", "content", "workers", "ps", "throughput"), SUCCESSES, ids=[s[0] for s in SUCCESSES]
)
def test_good_profile_loads(
    tmp_path: Path,
    name: str,
    content: bytes,
    workers: list[int],
    ps: list[int],
    throughput: list[float],
) -> None:
    path = tmp_path / f"{name}.csv"
    path.write_bytes(content)
    profile = load_profile(path)
    assert profile.workers.tolist() == workers
    assert profile.ps.tolist() == ps
    assert profile.throughput.tolist() == throughput


def test_directory_is_not_a_profile(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="is a directory"):
        load_profile(tmp_path)


def test_mode_column_keeps_unspecified_rows_for_either_mode(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("workers,ps,throughput,mode\n1,1,10,sync\n2,1,20,async\n4,1,30,\n")
    profile = load_profile(path)
    assert profile.for_mode("sync").workers.tolist() == [1, 4]
    assert profile.for_mode("async").workers.tolist() == [2, 4]


def test_asking_for_a_mode_the_file_lacks_says_which_modes_it_has(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("workers,ps,throughput,mode\n1,1,10,async\n")
    with pytest.raises(ProfileError, match=r"no rows with mode=sync \(the file has async\)"):
        load_profile(path).for_mode("sync")


def test_save_then_load_round_trips_exactly(tmp_path: Path) -> None:
    original = Profile.from_arrays(
        [1, 2, 8], [1, 1, 2], [123.456789012345, 2e5, 1 / 3], modes=["sync", None, "sync"]
    )
    path = tmp_path / "out.csv"
    save_profile(original, path)
    back = load_profile(path)
    assert back.workers.tolist() == [1, 2, 8]
    assert back.ps.tolist() == [1, 1, 2]
    assert back.throughput.tolist() == original.throughput.tolist()
    assert back.modes == ("sync", None, "sync")
    assert not list(tmp_path.glob(".out.csv.*")), "no temporary file left behind"


def test_repeats_share_a_configuration_id() -> None:
    profile = Profile.from_arrays([1, 1, 2, 2, 2], [1, 1, 1, 1, 2], [1.0, 2, 3, 4, 5])
    ids = profile.config_ids()
    assert ids[0] == ids[1] and ids[2] == ids[3] and ids[3] != ids[4]
    assert profile.n_configs == 3
    assert profile.on_ratio(4).tolist() == [True, True, True, True, False]


@pytest.mark.parametrize(
    ("workers", "ps", "throughput", "fragment"),
    [
        ([1, 0], [1, 1], [1.0, 2.0], "workers must be positive"),  # a zero count
        ([1, 2], [1, 1], [1.0, np.nan], "throughput must be positive and finite"),  # NaN
        ([1.5], [1], [1.0], "workers must be whole numbers"),  # fractional
        ([], [], [], "no rows"),  # empty
        ([1, 2], [1], [1.0, 2.0], "equally long"),  # misaligned
    ],
)
def test_from_arrays_validates_like_the_loader(
    workers: list[float], ps: list[int], throughput: list[float], fragment: str
) -> None:
    with pytest.raises(ProfileError, match=fragment):
        Profile.from_arrays(workers, ps, throughput)


def test_points_csv_without_ps_leaves_ps_to_the_model(tmp_path: Path) -> None:
    path = tmp_path / "pts.csv"
    path.write_text("workers\n3\n1\n")
    workers, ps = load_points(path)
    assert workers.tolist() == [3, 1] and ps is None


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("ps\n1\n", ":1: missing column 'workers'"),  # no workers column
        ("workers,ps\n4,0\n", ":2: ps must be a positive integer"),  # zero ps
        ("workers,ps,throughput\n4,1,9\n", ":1: unknown column 'throughput'"),  # a profile
    ],
)
def test_bad_points_name_file_and_line(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "pts.csv"
    path.write_text(content)
    with pytest.raises(ProfileError, match=fragment):
        load_points(path)
