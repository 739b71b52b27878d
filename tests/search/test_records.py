import json

import pytest

from tvm_hetero import Placement
from tvm_hetero.measure import ErrorKind, MeasureResult
from tvm_hetero.search.records import PlacementRecords


def ok(ms):
    return MeasureResult(ErrorKind.NONE, [ms, ms * 1.1, ms * 0.9])


P1 = Placement({"a": "cpu", "b": "cpu"})
P2 = Placement({"a": "cpu", "b": "cpu-generic"})
P3 = Placement({"a": "cpu-generic", "b": "cpu-generic"})


def test_commit_reload_and_best(tmp_path):
    path = tmp_path / "r.jsonl"
    db = PlacementRecords(path, "model", "devices")
    db.commit(P1, ok(2.0))
    db.commit(P2, ok(1.0))
    db.commit(P3, MeasureResult(ErrorKind.WRONG_ANSWER, message="x"))
    again = PlacementRecords(path, "model", "devices")
    assert len(again) == 3 and P2 in again
    assert again.get(P2).median_ms == pytest.approx(1.0)
    assert again.best()[0] == P2  # a wrong answer is never the best
    line = json.loads(path.read_text().splitlines()[0])
    assert {"format", "version", "tvm", "model", "devices", "placement", "result",
            "time"} <= set(line)


def test_truncated_last_line_is_skipped_and_appending_goes_on(tmp_path, caplog):
    path = tmp_path / "r.jsonl"
    db = PlacementRecords(path, "model", "devices")
    db.commit(P1, ok(2.0))
    db.commit(P2, ok(1.0))
    text = path.read_text()
    path.write_text(text[: len(text) - 25])  # a writer killed mid-line
    with caplog.at_level("WARNING"):
        resumed = PlacementRecords(path, "model", "devices")
    assert len(resumed) == 1 and P1 in resumed and resumed.skipped_lines == 1
    assert "truncated" in caplog.text
    resumed.commit(P3, ok(3.0))  # starts on a fresh line
    final = PlacementRecords(path, "model", "devices")
    assert len(final) == 2 and P3 in final and final.skipped_lines == 1


def test_foreign_records_are_ignored_with_a_notice(tmp_path, caplog):
    path = tmp_path / "r.jsonl"
    PlacementRecords(path, "other-model", "devices").commit(P1, ok(1.0))
    PlacementRecords(path, "model", "other-devices").commit(P2, ok(1.0))
    with caplog.at_level("INFO"):
        db = PlacementRecords(path, "model", "devices")
    assert len(db) == 0 and db.foreign_records == 2
    assert "ignored 2 record(s)" in caplog.text
    lines = path.read_text().splitlines()
    lines[0] = lines[0].replace('"tvm": "', '"tvm": "0.1-')
    path.write_text("\n".join(lines) + "\n")
    assert PlacementRecords(path, "other-model", "devices").foreign_records == 2


def test_not_a_records_file(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"hello": 1}\nnot json at all\n')
    db = PlacementRecords(path, "model", "devices")
    assert len(db) == 0 and db.skipped_lines == 2
