"""deploy/kubernetes manifests, parsed (no cluster here): the container's arguments are a valid
`laneserve serve` command line, the probes hit the gateway's real public health routes on the
served port, and the termination grace covers the drain those arguments configure."""
from __future__ import annotations

import importlib.util

import pytest
import yaml

from balancers import DEPLOY, serving_stack_missing

from gateway.http import auth
from gateway.cli.main import build_parser, serve_config

SANIC_CLOSE_S = 5.0  # gateway.app: Sanic's GRACEFUL_SHUTDOWN_TIMEOUT is the drain grace + 5 s


def _documents(name: str) -> list[dict]:
    with open(DEPLOY / "kubernetes" / name) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


@pytest.fixture(scope="module")
def deployment() -> dict:
    [doc] = _documents("deployment.yaml")
    assert doc["kind"] == "Deployment" and doc["apiVersion"] == "apps/v1"
    return doc


@pytest.fixture(scope="module")
def container(deployment) -> dict:
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return container


@pytest.fixture(scope="module")
def config(container):
    """The GatewayConfig the container's command line builds (validated like at start)."""
    assert container["command"] == ["laneserve"] and container["args"][0] == "serve"
    assert all(isinstance(arg, str) for arg in container["args"])  # YAML numbers must be quoted
    args = build_parser().parse_args(container["args"])
    return serve_config(args, {})


def _served_routes() -> set[str]:
    if importlib.util.find_spec("lanes.pool") is None or serving_stack_missing(real_model=False):
        pytest.skip("the gateway app needs the lanes' native runtime")
    from sanic import Sanic

    from gateway.app import APP_NAME, create_app

    original, Sanic.test_mode = Sanic.test_mode, True
    try:
        app = create_app()
        Sanic._app_registry.pop(APP_NAME, None)
    finally:
        Sanic.test_mode = original
    return {"/" + r.path.lstrip("/") for r in app.router.routes if "GET" in r.methods}


def test_probes_hit_public_health_routes_on_the_served_port(container, config):
    port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert port_names["http"] == config.port and config.host == "0.0.0.0"
    routes = _served_routes()
    probes = {kind: container[kind]["httpGet"] for kind in ("startupProbe", "readinessProbe", "livenessProbe")}
    assert probes["readinessProbe"]["path"] == "/health/ready"
    assert probes["livenessProbe"]["path"] == "/health/live"
    for kind, probe in probes.items():
        assert probe["path"] in routes, (kind, probe)
        assert probe["path"] in auth.PUBLIC_PATHS, (kind, probe)  # the kubelet sends no API key
        assert probe["port"] in ("http", config.port), (kind, probe)


def test_termination_grace_covers_the_drain(deployment, container, config):
    grace_s = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert config.drain_delay_s > 0  # endpoints take seconds to forget a pod: keep serving meanwhile
    assert grace_s >= config.drain_delay_s + config.drain_grace_s + SANIC_CLOSE_S, (grace_s, config)
    readiness = container["readinessProbe"]
    # Readiness itself notices the drain before new requests are refused.
    assert readiness["periodSeconds"] * readiness["failureThreshold"] < config.drain_delay_s


def test_threads_match_the_cpu_request_and_memory_is_requested(container, config):
    resources = container["resources"]
    assert config.threads == int(resources["requests"]["cpu"])  # sched_getaffinity sees the node's cores
    request_mib = int(resources["requests"]["memory"].removesuffix("Mi"))
    limit_mib = int(resources["limits"]["memory"].removesuffix("Mi"))
    assert 0 < request_mib <= limit_mib


def test_prometheus_scrape_annotations_point_at_metrics(deployment, config):
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == config.port
    assert annotations["prometheus.io/path"] == "/metrics" and "/metrics" in _served_routes()


def test_service_selects_the_pods_and_targets_the_named_port(deployment):
    [service] = _documents("service.yaml")
    assert service["kind"] == "Service"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert deployment["spec"]["template"]["metadata"]["labels"].items() >= service["spec"]["selector"].items()
    [port] = service["spec"]["ports"]
    assert port["targetPort"] == "http"
