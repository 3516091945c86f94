"""X-Session-ID: the client's name for a conversation, for load balancers and logs.

A balancer in session-affinity mode (deploy/haproxy, deploy/nginx) hashes this header so that the
turns of one chat land on the instance whose lane holds that chat's prefix in its K/V cache; the
gateway itself only carries it into the request's log line and record, so a conversation can be
followed across instances. It never changes how a request is served.

Rules: absent → None; 1-128 visible ASCII characters (0x21-0x7E; clients use UUIDs, user or chat
names) → kept as sent (the JSON log renderer escapes quotes and backslashes like every other
value); sent twice, empty, longer, or with spaces, control or non-ASCII characters → 400
`invalid_session_id` (a balancer would hash a doubled header one way and the log would say another).
"""
from __future__ import annotations

import re

from gateway.http.errors import invalid

HEADER = "X-Session-ID"
MAX_SESSION_ID_CHARS = 128
_VALID = re.compile(r"^[\x21-\x7e]{1,%d}$" % MAX_SESSION_ID_CHARS)


def resolve_session_id(header_values: list[str]) -> str | None:
    """The request's session id from its X-Session-ID header values, or None; raises the 400 APIError."""
    if not header_values:
        return None
    if len(header_values) > 1:
        raise invalid("X-Session-ID header sent more than once", param=HEADER, code="invalid_session_id")
    if not _VALID.match(header_values[0]):
        raise invalid(f"X-Session-ID must be 1-{MAX_SESSION_ID_CHARS} visible ASCII characters (no spaces)",
                      param=HEADER, code="invalid_session_id")
    return header_values[0]
