"""What the docs and the deployment files may name: real ``pgenough`` commands and options,
real configuration variables. Derived from the code (the typer app, ``Settings``), never from
a hand-kept list, so a renamed command or setting fails the tests that use these helpers."""

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
from pgenough.settings import Settings

_runner = CliRunner()


def root_command() -> Any:
    """The click group behind the typer app (typer may vendor click: duck-typed)."""
    command = typer.main.get_command(app)
    assert hasattr(command, "commands")
    return command


def _subcommands(command: Any) -> dict[str, Any]:
    return dict(getattr(command, "commands", {}))


def _walk(command: Any) -> Iterator[Any]:
    yield command
    for sub in _subcommands(command).values():
        yield from _walk(sub)


def env_variables() -> set[str]:
    """Every environment variable pgenough reads: the ``Settings`` fields with their prefix,
    their aliases, the variables CLI options read, and ``PGENOUGH_CONFIG``."""
    prefix = Settings.model_config.get("env_prefix", "")
    names = {f"{prefix}{name}".upper() for name in Settings.model_fields}
    for field in Settings.model_fields.values():
        alias = field.validation_alias
        for choice in getattr(alias, "choices", []):
            if isinstance(choice, str) and choice.isupper():
                names.add(choice)
    for command in _walk(root_command()):
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            if isinstance(envvar, str):
                names.add(envvar)
            elif envvar:
                names.update(envvar)
    if '"PGENOUGH_CONFIG"' in inspect.getsource(settings_module):
        names.add("PGENOUGH_CONFIG")
    return names


def variable_problem(name: str, known: set[str]) -> str | None:
    """Why ``name`` is not a variable pgenough reads, or None when it is."""
    if name in known:
        return None
    return f"{name} is not a setting (pgenough.settings.Settings) nor read by any command"


def command_problem(argv: list[str]) -> str | None:
    """Why ``pgenough *argv`` does not name a real command and real options, or None.

    The subcommand path must resolve, ``pgenough PATH --help`` must exit 0, and every
    ``--option`` given must be one of that command's options.
    """
    if not argv or argv[0].startswith("-"):
        # Options of the root command only (``pgenough --version``).
        options = {opt for p in root_command().params for opt in p.opts}
        bad = [a for a in argv if a.startswith("--") and a.split("=")[0] not in options]
        return f"unknown option(s) {bad} of pgenough" if bad else None
    command = root_command()
    path: list[str] = []
    rest = list(argv)
    while _subcommands(command) and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        sub = _subcommands(command).get(name)
        if sub is None:
            return f"pgenough {' '.join([*path, name])}: no such command"
        command, path = sub, [*path, name]
    result = _runner.invoke(app, [*path, "--help"])
    if result.exit_code != 0:
        return f"pgenough {' '.join(path)} --help exited {result.exit_code}: {result.output}"
    options = {opt for p in command.params for opt in p.opts}
    bad = [a for a in rest if a.startswith("--") and a.split("=")[0] not in options]
    if bad:
        return f"pgenough {' '.join(path)}: unknown option(s) {bad}"
    return None


def pgenough_invocations(text: str) -> list[list[str]]:
    """The arguments of every ``pgenough ...`` command in ``text``'s shell code blocks and
    inline code spans (environment assignments before it and ``# comments`` are dropped)."""
    found: list[list[str]] = []
    shell = [body for lang, body in code_blocks(text) if lang in ("", "sh", "bash", "console")]
    lines = [line for body in shell for line in body.splitlines()]
    lines += re.findall(r"(?<!`)`(pgenough [^`]+)`", text)
    for line in lines:
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            continue
        for i, token in enumerate(tokens):
            if token == "pgenough" and all("=" in t for t in tokens[:i]):
                found.append(tokens[i + 1 :])
                break
    return found


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
