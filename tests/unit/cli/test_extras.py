"""Commands of an extra that is not installed exist and say exactly how to get it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .support import fiduciary

pytestmark = pytest.mark.timeout(120)

NO_SERVER = ("starlette", "uvicorn")
ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "command",
    [["serve"], ["serve", "--port", "9000"], ["keys", "create", "--principal", "ana"]],
)
def test_a_server_command_without_the_extra_names_it_exactly(command: list[str]) -> None:
    result = fiduciary(*command, without=NO_SERVER)
    assert result.returncode == 2
    path = " ".join(c for c in command if not c.startswith("-") and c not in {"9000", "ana"})
    assert result.stderr == (
        f"error: fiduciary {path} needs the 'server' extra: pip install 'fiduciary[server]'\n"
    )


def test_the_help_without_the_extra_says_how_to_get_it() -> None:
    result = fiduciary("--help", without=NO_SERVER, columns=200)
    assert result.returncode == 0
    serve = next(line for line in result.stdout.splitlines() if " serve " in line)
    assert "(needs the server extra: pip install 'fiduciary[server]')" in serve
    keys = fiduciary("keys", "--help", without=NO_SERVER, columns=200).stdout
    assert "pip install 'fiduciary[server]'" in keys


def test_a_missing_postgres_driver_is_named_by_the_worker() -> None:
    result = fiduciary(
        "worker", "--agent", "x:y", "--postgres", "postgresql://", without=("psycopg",)
    )
    assert result.returncode == 2
    assert result.stderr == (
        "error: worker needs the 'postgres' extra: pip install 'fiduciary[postgres]'\n"
    )


def test_make_demo_installs_the_server_extra() -> None:
    plan = subprocess.run(
        ["make", "-n", "-B", "demo"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    install = next(i for i, line in enumerate(plan) if "pip install" in line and "-e" in line)
    demo = next(i for i, line in enumerate(plan) if line.endswith("fiduciary demo "))
    assert plan[install].endswith("-e '.[server]'")
    assert install < demo


def test_an_otlp_endpoint_without_the_observability_extra_is_one_line(tmp_path: Path) -> None:
    result = fiduciary(
        "demo",
        "--yes",
        "--db",
        tmp_path / "demo.sqlite3",
        without=("opentelemetry",),
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "error: OTEL_EXPORTER_OTLP_ENDPOINT is set: tracing needs the 'observability' extra: "
        "pip install 'fiduciary[observability]' (or unset it)\n"
    )
