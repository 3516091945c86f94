import pytest

from lanes.config import PoolConfig, config_from_env


def test_defaults_and_validation():
    assert PoolConfig().doorbell == "eventfd"
    with pytest.raises(ValueError, match="doorbell"):
        PoolConfig(doorbell="pipe")
    with pytest.raises(ValueError, match="power of two"):
        PoolConfig(output_ring_bytes=5000)
    with pytest.raises(ValueError, match="heartbeat"):
        PoolConfig(heartbeat_timeout_s=0)


def test_environment_is_read_in_one_place():
    cfg = config_from_env({"LANESERVE_LANES_DOORBELL": "semaphore", "LANESERVE_LANES_HEARTBEAT_TIMEOUT_S": "2.5"},
                          max_load_failures=5)
    assert (cfg.doorbell, cfg.heartbeat_timeout_s, cfg.max_load_failures) == ("semaphore", 2.5, 5)
