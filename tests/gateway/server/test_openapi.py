"""The OpenAPI 3.1 document: valid, complete (every registered route, nothing more), and rendered
from the validators' field tables (a bound in a table is the bound in the document)."""
from __future__ import annotations

import pytest
from openapi_spec_validator import validate
from sanic import Sanic

from gateway.server import openapi
from gateway.server.config import GatewayConfig
from gateway.openai.requests import CHAT_FIELDS, COMPLETION_FIELDS


@pytest.fixture
def app_routes(monkeypatch):
    from gateway.app import APP_NAME, create_app

    monkeypatch.setattr(Sanic, "test_mode", True)

    def routes(config):
        app = create_app(config=config)
        Sanic._app_registry.pop(APP_NAME, None)
        return {(m.lower(), openapi.openapi_path("/" + r.path.lstrip("/")))
                for r in app.router.routes for m in r.methods if m != "OPTIONS"}

    return routes


@pytest.mark.parametrize("lenient, api_key", [(False, False), (True, True)])
def test_the_document_is_valid_openapi_3_1(lenient, api_key):
    doc = openapi.document(lenient=lenient, api_key=api_key)
    assert doc["openapi"] == "3.1.0"
    validate(doc)


def test_every_registered_route_is_documented_or_explicitly_excluded(app_routes):
    doc = openapi.document()
    documented = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    served = app_routes(GatewayConfig())
    assert openapi.UNDOCUMENTED <= served  # the exclusions name served routes, in the document's spelling
    assert served - openapi.UNDOCUMENTED == documented


def test_request_bodies_come_from_the_field_tables():
    doc = openapi.document()
    body = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["properties"]) == set(CHAT_FIELDS)
    assert body["additionalProperties"] is False
    temperature = CHAT_FIELDS["temperature"]
    assert body["properties"]["temperature"]["maximum"] == temperature.hi
    completion = doc["paths"]["/v1/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(completion["properties"]) == set(COMPLETION_FIELDS)
    assert completion["required"] == ["model", "prompt"]


def test_lenient_opens_the_openai_bodies():
    body = openapi.document(lenient=True)["paths"]["/v1/completions"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["additionalProperties"] is True


def test_with_a_key_only_the_public_paths_lack_security():
    doc = openapi.document(api_key=True)
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for path, ops in doc["paths"].items():
        for op in ops.values():
            public = path in ("/health/live", "/health/ready", "/health", "/v1/health", "/", "/openapi.json")
            assert ("security" in op) != public, path
    assert all("security" not in op for ops in openapi.document()["paths"].values() for op in ops.values())


def test_busy_and_unavailable_answers_document_retry_after():
    op = openapi.document()["paths"]["/v1/chat/completions"]["post"]
    assert "Retry-After" in op["responses"]["429"]["headers"]
    assert "Retry-After" in op["responses"]["503"]["headers"]
    assert op["responses"]["400"]["content"]["application/json"]["schema"]["required"] == ["error"]
