"""docker-compose.yml stays right without a Docker engine: its services, dependencies, health checks
and GPU reservation are as documented, and every command it runs is a real command of the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from service.cli import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_services_and_startup_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"api", "worker", "agent", "postgres", "redis", "migrate"}
    assert services["agent"]["profiles"] == ["agents"] and services["agent"]["depends_on"]["api"] == {
        "condition": "service_healthy"
    }
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert services["api"]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert services["api"]["depends_on"]["redis"] == {"condition": "service_healthy"}
    assert services["worker"]["depends_on"]["api"] == {"condition": "service_healthy"}
    assert services["migrate"]["restart"] == "no"


def test_every_long_running_service_has_a_health_check(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("api", "worker", "postgres", "redis"):
        check = services[name]["healthcheck"]["test"]
        assert check[0] in ("CMD", "CMD-SHELL"), name
    assert "/readyz" in " ".join(services["api"]["healthcheck"]["test"])
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]


def test_worker_reserves_the_gpus(compose: dict[str, Any]) -> None:
    devices = compose["services"]["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert compose["services"]["worker"]["command"][:4] == ["strategist", "worker", "--pool", "gpu"]


def test_urls_point_at_the_compose_services(compose: dict[str, Any]) -> None:
    env = compose["services"]["api"]["environment"]
    assert (
        env["STRATEGIST_DATABASE_URL"].startswith("postgresql+psycopg://")
        and "@postgres:5432/" in env["STRATEGIST_DATABASE_URL"]
    )
    assert env["STRATEGIST_BROKER_URL"] == "redis://redis:6379/0"
    worker_cmd = compose["services"]["worker"]["command"]
    assert worker_cmd[worker_cmd.index("--api") + 1] == "http://api:8000"
    assert worker_cmd[worker_cmd.index("--broker") + 1] == env["STRATEGIST_BROKER_URL"]
    api_cmd = compose["services"]["api"]["command"]
    assert api_cmd[api_cmd.index("--port") + 1] == "8000" and compose["services"]["api"]["ports"] == [
        "8000:8000"
    ]


@pytest.mark.parametrize("service", ["migrate", "api", "worker", "agent"])
def test_commands_are_valid_cli_invocations(compose: dict[str, Any], service: str) -> None:
    """Each command parses against the real typer app (``--help`` appended: parse, do not run)."""
    command = compose["services"][service]["command"]
    assert command[0] == "strategist"
    result = CliRunner().invoke(app, [*command[1:], "--help"])
    assert result.exit_code == 0, result.output
    # every option the command passes is one the CLI declares
    for arg in command[1:]:
        if arg.startswith("--"):
            assert arg in result.output, f"{service}: {arg} is not an option of `{' '.join(command[:3])}`"
