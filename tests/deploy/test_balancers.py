"""The balancer tests' own rule: a missing haproxy/nginx skips on a developer machine (with the
install hint) and fails in CI, where .ci/run installs them and sets LANESERVE_TEST_REQUIRE_BALANCERS."""
from __future__ import annotations

import pytest

import balancers


def test_missing_balancer_skips_with_the_hint_or_fails_in_ci(monkeypatch):
    monkeypatch.setattr(balancers, "find_binary", lambda name: None)
    monkeypatch.delenv("LANESERVE_TEST_REQUIRE_BALANCERS", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"apt-get install haproxy"):
        balancers.require_binary("haproxy", "haproxy")
    monkeypatch.setenv("LANESERVE_TEST_REQUIRE_BALANCERS", "1")
    with pytest.raises(pytest.fail.Exception, match="CI requires it"):
        balancers.require_binary("nginx", "nginx-light")


def test_nginx_template_renders_only_its_own_variables():
    text = balancers.render_nginx({"LB_BIND": "127.0.0.1:1", "LB_SERVER1": "127.0.0.1:2",
                                   "LB_SERVER2": "127.0.0.1:3", "LB_BALANCE": balancers.NGINX_BALANCE[True]})
    assert "${" not in text
    assert "hash $http_x_session_id consistent;" in text and "$upstream_addr" in text  # nginx's own stay
