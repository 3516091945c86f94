"""Records: one JSON line per finished request, a fixed schema with no field for text."""
import dataclasses
import json

import pytest

from gateway.server.records import OUTCOMES, RecordsFile, RequestRecord


def test_one_line_per_record_appended(tmp_path):
    path = tmp_path / "records.jsonl"
    records = RecordsFile(str(path))
    records.write(RequestRecord(request_id="a", route="chat", model="smollm2", outcome="success", status=200,
                                prompt_tokens=5, completion_tokens=3))
    records.write(RequestRecord(request_id="b", route="completions", outcome="saturated", status=429,
                                error_code="server_busy"))
    records.close()
    records = RecordsFile(str(path))  # reopening appends
    records.write(RequestRecord(request_id="c", route="chat", outcome="disconnect", status=499))
    records.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["request_id"] for r in lines] == ["a", "b", "c"]
    assert lines[0]["prompt_tokens"] == 5 and lines[1]["error_code"] == "server_busy"
    assert all(r["time_unix_s"] > 0 for r in lines)


def test_schema_has_no_text_fields():
    names = {f.name for f in dataclasses.fields(RequestRecord)}
    assert not names & {"prompt", "messages", "text", "content", "output", "stop", "completion"}


def test_unknown_outcome_is_a_bug():
    records_outcomes = set(OUTCOMES)
    assert records_outcomes == {"success", "error", "timeout", "saturated", "disconnect", "cancelled"}
    with pytest.raises(ValueError):
        RecordsFile("/dev/null").write(RequestRecord(request_id="x", route="chat", outcome="weird"))
