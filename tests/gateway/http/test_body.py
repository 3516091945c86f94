"""Strict body parsing: the R1 malformed-JSON matrix, each a 400/415 envelope without echoing bytes."""
import pytest

from gateway.http.body import parse_json_object
from gateway.http.errors import APIError

HOSTILE = {
    "truncated": b'{"model": "x"',
    "array root": b'[1, 2]',
    "string root": b'"hi"',
    "nan": b'{"temperature": NaN}',
    "infinity": b'{"temperature": Infinity}',
    "1e999": b'{"temperature": 1e999}',
    "lone surrogate": b'{"prompt": "\\ud800"}',
    "invalid utf-8": b'{"prompt": "\xff\xfe"}',
    "bom": b'\xef\xbb\xbf{"prompt": "x"}',
    "deep nesting": b'{"a":' + b'[' * 100_000 + b']' * 100_000 + b'}',
    "moderate nesting": b'{"a":' + b'[' * 40 + b']' * 40 + b'}',
    "empty": b'',
    "whitespace": b'  \n ',
    "gbk": '{"prompt": "你好"}'.encode("gbk"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_bodies_are_400(name):
    with pytest.raises(APIError) as info:
        parse_json_object(HOSTILE[name], "application/json", max_depth=32)
    error = info.value
    assert error.status == 400 and error.type == "invalid_request_error"
    body = error.body().decode("utf-8")  # always valid UTF-8 JSON
    assert "\\ud800" not in body and "你" not in body


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "application/json; charset=gbk", "multipart/form-data"])
def test_wrong_content_type_is_415(content_type):
    with pytest.raises(APIError) as info:
        parse_json_object(b'{"a": 1}', content_type, max_depth=32)
    assert info.value.status == 415


@pytest.mark.parametrize("content_type", [None, "", "application/json", "application/json; charset=UTF-8",
                                          "application/vnd.api+json"])
def test_json_content_types_are_accepted(content_type):
    assert parse_json_object(b'{"a": [1, {"b": null}]}', content_type, max_depth=32) == {"a": [1, {"b": None}]}


def test_depth_limit_is_exact():
    assert parse_json_object(b'{"a":[[1]]}', None, max_depth=3)
    with pytest.raises(APIError):
        parse_json_object(b'{"a":[[[1]]]}', None, max_depth=3)


def test_huge_integers_survive_as_floats_for_type_checks():
    assert type(parse_json_object(b'{"n": 123456789012345678901234567890}', None, 32)["n"]) is float
