"""The SWF loader: good logs load field by field; every bad row names FILE:LINE and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from placement.errors import PlacementInputError
from placement.workloads.swf import load_swf

HEADER = "; Version: 2\n; MaxNodes: 8\n; MaxProcs: 16\n"
GOOD = "1 0 -1 100 4 -1 -1 4 120 -1 1 -1 -1 -1 0 -1 -1 -1\n"
GOOD2 = "2 5 -1 30.5 -1 -1 -1 2 -1 -1 1 3 -1 -1 0 -1 -1 -1\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "log.swf"
    path.write_text(text, encoding="utf-8")
    return path


def test_loads_every_field_and_the_header(tmp_path: Path) -> None:
    trace = load_swf(write(tmp_path, HEADER + GOOD + "\n" + GOOD2))
    assert trace.max_nodes == 8 and trace.max_procs == 16 and trace.processors == 16
    assert trace.header["Version"] == "2"
    first, second = trace.jobs
    assert (first.job_id, first.submit_s, first.run_s, first.allocated_procs) == (1, 0, 100, 4)
    assert (first.requested_procs, first.requested_time_s, first.line) == (4, 120, 4)
    # Fractional times are allowed (the SWF definition permits them); -1 stays "unknown".
    assert second.run_s == 30.5 and second.allocated_procs == -1 and second.requested_time_s == -1
    assert second.user_id == 3 and second.line == 6


def test_processors_fall_back_to_max_nodes_when_max_procs_is_absent(tmp_path: Path) -> None:
    trace = load_swf(write(tmp_path, "; MaxNodes: 256\n" + GOOD))
    assert trace.max_procs is None and trace.processors == 256


def test_comment_lines_between_jobs_and_free_text_comments_are_skipped(tmp_path: Path) -> None:
    trace = load_swf(write(tmp_path, "; just words\n" + GOOD + ";  Note: mid-file\n" + GOOD2))
    assert [j.job_id for j in trace.jobs] == [1, 2]
    assert trace.header["Note"] == "mid-file"


BAD_ROWS = [
    # too few fields (a truncated line)
    ("1 0 -1 100 4 -1 -1 4 120", "log.swf:2: expected 18 fields, found 9"),
    # too many fields
    (GOOD.strip() + " 7", "log.swf:2: expected 18 fields, found 19"),
    # a word where a number must be
    (GOOD.replace(" 100 ", " ten "), "log.swf:2: run_s: 'ten' is not a number"),
    # NaN is not a run time
    (GOOD.replace(" 100 ", " nan "), "log.swf:2: run_s: 'nan' is not a finite number"),
    # a fractional processor count is a corrupt row
    (GOOD.replace(" 4 -1 -1 4 ", " 4 -1 -1 4.5 "), "requested_procs: '4.5' must be a whole number"),
    # negative values other than -1 mean nothing
    (GOOD.replace(" 100 ", " -5 "), "log.swf:2: run_s: -5 is negative"),
    # job numbers start at 1
    ("0" + GOOD[1:], "log.swf:2: job_id: 0 must be 1 or more"),
    # a job without a submit time cannot be simulated
    (GOOD.replace("1 0 -1", "1 -1 -1", 1), "log.swf:2: submit_s: unknown (-1)"),
]


@pytest.mark.parametrize(("row", "message"), BAD_ROWS)
def test_a_bad_row_names_its_file_line_and_reason(tmp_path: Path, row: str, message: str) -> None:
    path = write(tmp_path, "; MaxNodes: 8\n" + row + "\n")
    with pytest.raises(PlacementInputError) as err:
        load_swf(path)
    assert message in str(err.value)
    assert str(err.value).startswith(str(path))
    assert err.value.line == 2


def test_a_repeated_job_number_points_at_both_lines(tmp_path: Path) -> None:
    with pytest.raises(PlacementInputError, match=r"log.swf:3: job_id: 1 repeats line 2"):
        load_swf(write(tmp_path, "; MaxNodes: 8\n" + GOOD + GOOD))


def test_a_bad_header_count_is_an_error_not_a_silent_default(tmp_path: Path) -> None:
    with pytest.raises(PlacementInputError, match=r"log.swf:1: MaxNodes: 'many'"):
        load_swf(write(tmp_path, "; MaxNodes: many\n" + GOOD))
    with pytest.raises(PlacementInputError, match=r"log.swf:1: MaxProcs: 0 must be 1 or more"):
        load_swf(write(tmp_path, "; MaxProcs: 0\n" + GOOD))


def test_a_file_without_jobs_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PlacementInputError, match=r"log.swf: no jobs"):
        load_swf(write(tmp_path, HEADER + "\n"))


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PlacementInputError, match=r"nope.swf: no such file"):
        load_swf(tmp_path / "nope.swf")


def test_a_binary_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "log.swf"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(PlacementInputError, match=r"log.swf: cannot read"):
        load_swf(path)
