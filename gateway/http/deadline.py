"""An absolute deadline for receiving a request (headers and body).

Sanic's REQUEST_TIMEOUT restarts on every byte received, so a slowloris client trickling a
header byte every few seconds keeps its connection forever (measured here: 16 s against a 5 s
timeout). Here the clock starts when a request's first byte arrives and is not reset by later
bytes of the same request; keep-alive idle time before it does not count. Used by
`laneserve serve`; Sanic's CLI cannot take a protocol class, so that path keeps Sanic's rule.

Sanic checks its timers every min(timeouts) / 2 seconds, so a deadline of D seconds was enforced
anywhere in [D, 1.5 D] (measured: 500 tricklers against a 10 s deadline closed after up to 15 s).
While a request is arriving, the next check is moved to the moment its deadline passes.
"""
from __future__ import annotations

from time import monotonic

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

    def check_timeouts(self):
        super().check_timeouts()
        http = getattr(self, "_http", None)
        pending = getattr(self, "_callback_check_timeouts", None)
        if http is None or http.stage is not Stage.REQUEST or pending is None or pending.cancelled():
            return
        remaining_s = self.request_timeout - (monotonic() - self._time)
        if remaining_s + 0.01 < pending.when() - self.loop.time():
            pending.cancel()
            self._callback_check_timeouts = self.loop.call_later(max(0.01, remaining_s + 0.01), self.check_timeouts)
