"""The one place that reads LANESERVE_* environment variables."""
from __future__ import annotations

import os
from typing import Mapping

from gateway.server.config import env_name, field_names


def settings_from_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Raw string values of every LANESERVE_<FIELD> that is set (LANESERVE_MODEL for `models`)."""
    environ = os.environ if environ is None else environ
    return {name: environ[env_name(name)] for name in field_names() if env_name(name) in environ}
