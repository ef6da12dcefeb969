"""The plan service's deployment files (plan-service/deploy/) name real modes, real options
and real settings.

What runs here: compose.yaml is parsed and each service's command is resolved against
the ``pgenough-plans`` CLI (``pgenough PATH --help`` must exit 0, every option must exist); the
Dockerfile's instructions are parsed the same way; the systemd units are parsed, and checked
with ``systemd-analyze verify`` when it is installed. Nothing builds the image or starts a
container: that needs a Docker daemon and a registry.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pgenough.core.worker import DEFAULT_SHUTDOWN_TIMEOUT
from pgenough_plans.settings import PlanSettings
from tests.helpers.cli import command_problem, env_variables, variable_problem
from tests.helpers.procs import ROOT

DEPLOY = ROOT / "plan-service" / "deploy"
PROGRAM = "pgenough-plans"
UNITS = DEPLOY / "systemd"
MODES = {("migrate",), ("worker", "fetch"), ("worker", "process"), ("api",)}


def mode_of(argv: list[str]) -> tuple[str, ...]:
    return tuple(argv[:2]) if argv[:1] == ["worker"] else tuple(argv[:1])


# -- compose.yaml ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "compose.yaml").read_text("utf-8"))
    assert isinstance(data, dict)
    return data


def pgenough_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run the pgenough image (every one but the database)."""
    return {n: s for n, s in compose["services"].items() if "build" in s}


def test_compose_has_the_services(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"db", "migrate", "fetch", "process", "api", "provider-sim"}
    assert set(pgenough_services(compose)) == set(compose["services"]) - {"db"}


def test_compose_database_is_postgres_16_with_a_healthcheck(compose: dict[str, Any]) -> None:
    db = compose["services"]["db"]
    assert db["image"] == "postgres:16"
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    env = db["environment"]
    url = f"postgresql://{env['POSTGRES_USER']}:{env['POSTGRES_PASSWORD']}@db:5432/"
    for name, service in pgenough_services(compose).items():
        assert service["environment"]["DATABASE_URL"] == url + env["POSTGRES_DB"], name


def test_compose_builds_the_dockerfile_from_the_repository_root(compose: dict[str, Any]) -> None:
    for name, service in pgenough_services(compose).items():
        context = (DEPLOY / service["build"]["context"]).resolve()
        assert context == ROOT, name
        assert (context / service["build"]["dockerfile"]).is_file(), name


def test_compose_commands_are_real_modes(compose: dict[str, Any]) -> None:
    entrypoint = dockerfile_json("ENTRYPOINT")
    assert entrypoint == [PROGRAM]
    modes = set()
    for name, service in pgenough_services(compose).items():
        command = service["command"]
        assert isinstance(command, list), f"{name}: use the exec form"
        assert "entrypoint" not in service, name
        assert command_problem(command, PROGRAM) is None, (name, command_problem(command, PROGRAM))
        modes.add(mode_of(command))
    assert modes == MODES | {("provider-sim",)}


def test_compose_environment_names_real_settings(compose: dict[str, Any]) -> None:
    known = env_variables()
    for name, service in pgenough_services(compose).items():
        problems = [p for var in service["environment"] if (p := variable_problem(var, known))]
        assert not problems, (name, problems)


def test_compose_ordering(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["migrate"]["depends_on"] == {"db": {"condition": "service_healthy"}}
    assert services["migrate"]["restart"] == "no"
    for name in ("fetch", "process", "api"):
        depends = services[name]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}, name
        assert services[name]["restart"] == "unless-stopped", name
    assert services["fetch"]["depends_on"]["provider-sim"] == {"condition": "service_healthy"}


def test_compose_fetch_points_at_the_simulator(compose: dict[str, Any]) -> None:
    services = compose["services"]
    providers = services["fetch"]["environment"]["PGENOUGH_PROVIDERS"]
    configs = PlanSettings(providers=providers).provider_configs()
    sim = services["provider-sim"]["command"]
    port = sim[sim.index("--port") + 1]
    assert sim[sim.index("--host") + 1] == "0.0.0.0"
    assert [c.url for c in configs] == [f"http://provider-sim:{port}/planList"]


def test_compose_process_scale_and_api_port(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["process"]["deploy"]["replicas"] == 2
    api = services["api"]
    assert api["environment"]["PGENOUGH_API_HOST"] == "0.0.0.0"
    port = api["environment"]["PGENOUGH_API_PORT"]
    assert api["ports"] == [f"{port}:{port}"]
    assert f"127.0.0.1:{port}/health/ready" in " ".join(api["healthcheck"]["test"])


def test_compose_stop_grace_outlasts_the_worker_shutdown(compose: dict[str, Any]) -> None:
    for name in ("fetch", "process"):
        grace = seconds(compose["services"][name]["stop_grace_period"])
        assert grace > DEFAULT_SHUTDOWN_TIMEOUT, name


# -- Dockerfile --------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    text = (DEPLOY / "Dockerfile").read_text("utf-8")
    text = re.sub(r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not ln.startswith("#")))
    found = []
    for line in text.splitlines():
        if line.strip():
            instruction, _, args = line.strip().partition(" ")
            found.append((instruction.upper(), args.strip()))
    return found


def dockerfile_json(instruction: str) -> list[str]:
    values = [a for i, a in dockerfile_instructions() if i == instruction]
    assert len(values) == 1, f"one {instruction}"
    parsed = json.loads(values[0])  # the exec form: a JSON array
    assert isinstance(parsed, list)
    return [str(v) for v in parsed]


def test_dockerfile_base_and_user() -> None:
    instructions = dockerfile_instructions()
    bases = [args.split()[0] for i, args in instructions if i == "FROM"]
    assert bases and all(b == "python:3.11-slim" for b in bases)
    final = instructions[max(n for n, (i, _) in enumerate(instructions) if i == "FROM") :]
    users = [args for i, args in final if i == "USER"]
    assert users, "the final stage sets a USER"
    assert users[-1].split(":")[0] not in ("root", "0")


def test_dockerfile_default_command_is_the_api() -> None:
    entrypoint, cmd = dockerfile_json("ENTRYPOINT"), dockerfile_json("CMD")
    assert entrypoint == [PROGRAM]
    assert cmd == ["api"]
    assert command_problem(cmd, PROGRAM) is None
    # `docker run IMAGE worker fetch` replaces CMD: every mode is reachable the same way.
    for mode in MODES:
        assert command_problem(list(mode), PROGRAM) is None


def test_dockerfile_installs_the_plan_service_on_the_library_it_built() -> None:
    """Both distributions are built from this repository: the plan service's wheel and the
    pgenough wheel it depends on (not another from the index)."""
    instructions = dockerfile_instructions()
    wheels = [a for i, a in instructions if i == "RUN" and "pip wheel" in a]
    assert len(wheels) == 1 and wheels[0].split()[-2:] == [".", "./plan-service"], wheels
    installs = [a for i, a in instructions if i == "RUN" and "pip install" in a]
    assert len(installs) == 1 and "--find-links /wheels pgenough-plans" in installs[0], installs


def test_dockerfile_environment_names_real_settings() -> None:
    known = env_variables()
    for instruction, args in dockerfile_instructions():
        if instruction == "ENV":
            for token in shlex.split(args):
                name = token.partition("=")[0]
                if name.startswith("PGENOUGH_"):
                    assert variable_problem(name, known) is None, name


def test_dockerfile_copies_what_the_context_keeps() -> None:
    """Every COPY source exists at the repository root and .dockerignore keeps it."""
    ignored = [
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text("utf-8").splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    sources = []
    for instruction, args in dockerfile_instructions():
        if instruction == "COPY" and not args.startswith("--from"):
            sources += args.split()[:-1]
    assert {"pyproject.toml", "README.md", "src", "plan-service/src"} <= set(sources)
    for source in sources:
        assert (ROOT / source).exists(), source
        assert not any(fnmatch.fnmatch(source, pattern) for pattern in ignored), source


# -- systemd units -----------------------------------------------------------------------


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file as section -> key -> values (keys may repeat in systemd)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text("utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{path.name}: {line!r} outside a section"
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: {line!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def seconds(span: str) -> float:
    """A systemd or compose time span ("60s", "2min", "2m", "1m30s", "90") in seconds."""
    units = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", span.strip())
    assert parts, span
    return sum(float(n) * units[u] for n, u in parts)


UNIT_FILES = sorted(UNITS.glob("*.service"))
LONG_RUNNING = ["pgenough-fetch.service", "pgenough-process@.service", "pgenough-api.service"]


def test_the_units_exist() -> None:
    assert [p.name for p in UNIT_FILES] == sorted([*LONG_RUNNING, "pgenough-migrate.service"])


def exec_start(unit: dict[str, dict[str, list[str]]]) -> list[str]:
    (line,) = unit["Service"]["ExecStart"]
    return shlex.split(line)


@pytest.mark.parametrize("path", UNIT_FILES, ids=lambda p: p.name)
def test_unit_runs_a_real_mode(path: Path) -> None:
    unit = parse_unit(path)
    argv = exec_start(unit)
    assert Path(argv[0]).name == PROGRAM and Path(argv[0]).is_absolute()
    assert command_problem(argv[1:], PROGRAM) is None, command_problem(argv[1:], PROGRAM)
    assert mode_of(argv[1:]) in MODES
    service = unit["Service"]
    assert service["EnvironmentFile"] == ["/etc/pgenough/env"]
    assert service["User"] == ["pgenough"]
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
    }.items():
        assert service[key] == [value], key
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_units_cover_every_mode() -> None:
    assert {mode_of(exec_start(parse_unit(p))[1:]) for p in UNIT_FILES} == MODES


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_long_running_unit_restarts_and_stops_gracefully(name: str) -> None:
    unit = parse_unit(UNITS / name)
    service = unit["Service"]
    assert service["Restart"] == ["on-failure"]
    assert service["KillSignal"] == ["SIGTERM"]
    (timeout,) = service["TimeoutStopSec"]
    assert seconds(timeout) > DEFAULT_SHUTDOWN_TIMEOUT
    assert "pgenough-migrate.service" in " ".join(unit["Unit"]["Requires"])
    assert "pgenough-migrate.service" in " ".join(unit["Unit"]["After"])


def test_migrate_unit_is_a_oneshot() -> None:
    service = parse_unit(UNITS / "pgenough-migrate.service")["Service"]
    assert service["Type"] == ["oneshot"]
    assert service["RemainAfterExit"] == ["yes"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """With ExecStart pointed at the installed script (the units name /opt/pgenough)."""
    script = str(Path(sys.executable).parent / PROGRAM)
    assert Path(script).is_file()
    for path in UNIT_FILES:
        text = path.read_text("utf-8").replace(f"/opt/pgenough/bin/{PROGRAM}", script)
        (tmp_path / path.name).write_text(text, "utf-8")
    names = [p.name.replace("@.service", "@1.service") for p in UNIT_FILES]
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *names],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert not result.stderr.strip(), result.stderr
