"""An absolute deadline for receiving a request (headers and body).

Sanic's REQUEST_TIMEOUT restarts on every byte received, so a slowloris client trickling a
header byte every few seconds keeps its connection forever (measured here: 16 s against a 5 s
timeout). Here the clock starts when a request's first byte arrives and is not reset by later
bytes of the same request; keep-alive idle time before it does not count. Used by
`laneserve serve`; Sanic's CLI cannot take a protocol class, so that path keeps Sanic's rule.
"""
from __future__ import annotations

from sanic.http.constants import Stage
from sanic.server.protocols.http_protocol import HttpProtocol


class DeadlineHttpProtocol(HttpProtocol):
    def data_received(self, data: bytes):
        http = getattr(self, "_http", None)
        same_request = http is not None and http.stage is Stage.REQUEST
        started_s = self._time
        super().data_received(data)
        if same_request and data:
            self._time = started_s  # Sanic's check_timeouts() measures REQUEST_TIMEOUT from here
