"""`laneserve serve`: start every lane synchronously, then serve HTTP in this same process.

Sanic runs single-process here, so the lanes' supervisor lives in the process that serves the
requests and no worker has to spawn children; SIGINT/SIGTERM drain and exit 0.
"""
from __future__ import annotations

import importlib
import sys

from gateway.server.config import GatewayConfig
from gateway.server.logs import configure_logging, get_logger


def serve(config: GatewayConfig) -> int:
    configure_logging(config.log_level, config.log_format)
    log = get_logger()
    from gateway.server.lifecycle import ServingLanes, StartupFailed
    from gateway.server.models_dir import eager_entries

    log.info("starting", models=[m.name for m in eager_entries(config)], models_dir=config.models_dir,
             replicas=config.replicas, ctx_size=config.ctx_size)
    try:
        # The HTTP side's imports (~0.5-1 s) overlap the lanes' model loading.
        backend = ServingLanes.start(config, while_loading=lambda: importlib.import_module("gateway.app"))
    except StartupFailed as exc:
        print(f"laneserve: startup failed: {exc}", file=sys.stderr, flush=True)
        return 1
    try:
        from gateway.app import create_app

        app = create_app(config=config, backend=backend)
        from gateway.http.deadline import DeadlineHttpProtocol

        app.run(host=config.host, port=config.port, single_process=True, access_log=False, motd=False,
                protocol=DeadlineHttpProtocol)
    except BaseException as exc:
        backend.close()
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        print(f"laneserve: cannot serve: {exc}", file=sys.stderr, flush=True)
        return 1
    backend.close()  # idempotent: after_server_stop normally closed it already
    return 0
