"""What the docs and the deployment files may name: real ``pgenough`` and ``pgenough-plans``
commands and options, real configuration variables. Derived from the code (the typer apps,
``Settings`` and the plan service's ``PlanSettings``), never from a hand-kept list, so a
renamed command or setting fails the tests that use these helpers."""

from __future__ import annotations

import inspect
import re
import shlex
from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner

from pgenough import settings as settings_module
from pgenough.cli import app
from pgenough.core.tasks import EAGER_VARIABLE
from pgenough.settings import Settings
from pgenough_plans import settings as plan_settings_module
from pgenough_plans.cli import app as plan_app
from pgenough_plans.progress import FORCE_ENV
from pgenough_plans.settings import PlanSettings

_runner = CliRunner()
PROGRAMS: dict[str, typer.Typer] = {"pgenough": app, "pgenough-plans": plan_app}
"""Each command's typer app."""


def root_command(program: str = "pgenough") -> Any:
    """The click group behind a command's typer app (typer may vendor click: duck-typed)."""
    command = typer.main.get_command(PROGRAMS[program])
    assert hasattr(command, "commands")
    return command


def _subcommands(command: Any) -> dict[str, Any]:
    return dict(getattr(command, "commands", {}))


def _walk(command: Any) -> Iterator[Any]:
    yield command
    for sub in _subcommands(command).values():
        yield from _walk(sub)


def env_variables(*, plans: bool = True) -> set[str]:
    """Every environment variable pgenough reads (and, with ``plans``, the plan service): the
    settings' fields with their prefix, their aliases, the variables CLI options read, the
    variables that name config files, ``App``'s eager switch (and the plan service's forced
    progress bars)."""
    classes: list[type[Settings]] = [PlanSettings] if plans else [Settings]
    programs = ["pgenough", "pgenough-plans"] if plans else ["pgenough"]
    names: set[str] = set()
    for cls in classes:
        prefix = cls.model_config.get("env_prefix", "")
        names |= {f"{prefix}{name}".upper() for name in cls.model_fields}
        for field in cls.model_fields.values():
            alias = field.validation_alias
            for choice in getattr(alias, "choices", []):
                if isinstance(choice, str) and choice.isupper():
                    names.add(choice)
    for program in programs:
        for command in _walk(root_command(program)):
            for param in command.params:
                envvar = getattr(param, "envvar", None)
                if isinstance(envvar, str):
                    names.add(envvar)
                elif envvar:
                    names.update(envvar)
    if '"PGENOUGH_CONFIG"' in inspect.getsource(settings_module):
        names.add(Settings.CONFIG_ENV)
    names.add(EAGER_VARIABLE)
    if plans and "CONFIG_ENV" in inspect.getsource(plan_settings_module):
        names.add(PlanSettings.CONFIG_ENV)
    if plans:
        names.add(FORCE_ENV)
    return names


def variable_problem(name: str, known: set[str]) -> str | None:
    """Why ``name`` is not a variable pgenough reads, or None when it is."""
    if name in known:
        return None
    return f"{name} is not a setting (Settings, PlanSettings) nor read by any command"


def command_problem(argv: list[str], program: str = "pgenough") -> str | None:
    """Why ``program *argv`` does not name a real command and real options, or None.

    The subcommand path must resolve, ``program PATH --help`` must exit 0, and every
    ``--option`` given must be one of that command's options.
    """
    if not argv or argv[0].startswith("-"):
        # Options of the root command only (``pgenough --version``, ``--help``).
        options = {opt for p in root_command(program).params for opt in p.opts} | {"--help"}
        bad = [a for a in argv if a.startswith("--") and a.split("=")[0] not in options]
        return f"unknown option(s) {bad} of {program}" if bad else None
    command = root_command(program)
    path: list[str] = []
    rest = list(argv)
    while _subcommands(command) and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        sub = _subcommands(command).get(name)
        if sub is None:
            return f"{program} {' '.join([*path, name])}: no such command"
        command, path = sub, [*path, name]
    result = _runner.invoke(PROGRAMS[program], [*path, "--help"])
    if result.exit_code != 0:
        return f"{program} {' '.join(path)} --help exited {result.exit_code}: {result.output}"
    options = {opt for p in command.params for opt in p.opts}
    bad = [a for a in rest if a.startswith("--") and a.split("=")[0] not in options]
    if bad:
        return f"{program} {' '.join(path)}: unknown option(s) {bad}"
    return None


def invocations(text: str, program: str = "pgenough") -> list[list[str]]:
    """The arguments of every ``program ...`` command in ``text``'s shell code blocks and
    inline code spans (environment assignments before it and ``# comments`` are dropped)."""
    found: list[list[str]] = []
    shell = [body for lang, body in code_blocks(text) if lang in ("", "sh", "bash", "console")]
    lines = [line for body in shell for line in body.splitlines()]
    lines += re.findall(rf"(?<!`)`({re.escape(program)} [^`]+)`", text)
    for line in lines:
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            continue
        for i, token in enumerate(tokens):
            if token == program and all("=" in t for t in tokens[:i]):
                found.append(tokens[i + 1 :])
                break
    return found


def pgenough_invocations(text: str) -> list[list[str]]:
    """``invocations`` of ``pgenough``."""
    return invocations(text, "pgenough")


def command_problems(text: str) -> list[str]:
    """What is wrong with every ``pgenough`` and ``pgenough-plans`` command ``text`` names."""
    return [
        problem
        for program in PROGRAMS
        for argv in invocations(text, program)
        if (problem := command_problem(argv, program))
    ]


def code_blocks(text: str) -> list[tuple[str, str]]:
    """The fenced code blocks of a Markdown text: (language, body)."""
    blocks: list[tuple[str, str]] = []
    lang: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if line.startswith("```"):
            if lang is None:
                lang, body = line[3:].strip(), []
            else:
                blocks.append((lang, "\n".join(body) + "\n"))
                lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, "an unclosed code block"
    return blocks
