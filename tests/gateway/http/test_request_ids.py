"""X-Request-ID: kept when valid, generated when absent, 400 when invalid, repeated or in flight."""
import pytest

from gateway.http.errors import APIError
from gateway.http.request_ids import InFlightIds, resolve_request_id


def test_valid_id_is_kept():
    assert resolve_request_id(["abc-123_x.y:z"]) == "abc-123_x.y:z"


def test_absent_id_is_generated_and_unique():
    a, b = resolve_request_id([]), resolve_request_id([])
    assert a != b and len(a) == 32


@pytest.mark.parametrize("values", [[""], ["has space"], ["x" * 129], ["new\nline"], ["ünï"], ["a", "b"], ["a", "a"]])
def test_invalid_or_repeated_header_is_400(values):
    with pytest.raises(APIError) as info:
        resolve_request_id(values)
    assert info.value.status == 400 and info.value.param == "X-Request-ID"


def test_in_flight_duplicate_is_400_but_reuse_after_release_is_fine():
    ids = InFlightIds()
    ids.claim("r1")
    with pytest.raises(APIError) as info:
        ids.claim("r1")
    assert info.value.code == "duplicate_request_id"
    ids.release("r1")
    ids.claim("r1")  # openai-python re-sends the same id when it retries
    assert len(ids) == 1
