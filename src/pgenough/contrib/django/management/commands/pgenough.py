"""``manage.py pgenough worker``: ``pgenough worker run`` for a Django project.

The options are ``pgenough worker run``'s, their defaults the ``PGENOUGH`` setting's
(``conf.py``); the database is the ``PGENOUGH["DATABASE"]`` alias of ``DATABASES``. Bad usage
or configuration exits 2 and a database that does not answer exits 1, each with one line;
SIGTERM lets running jobs finish (up to the shutdown timeout), then exits 0. Django's own
options (``--settings``, ``--pythonpath``, ``-v``...) are taken before or after ``worker``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import math
from typing import Any, NoReturn

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from pgenough.contrib.django import conf, db, worker
from pgenough.core import PgenoughError, WorkerConfig
from pgenough.core.worker.config import MAX_BATCH_SIZE, MAX_CONCURRENCY, parse_queues

USAGE = 2


class _OneLineParser(CommandParser):
    """Bad usage is one line and exit 2 (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        if not self.called_from_command_line:
            raise CommandError(f"{self.prog}: {message}", returncode=USAGE)
        self.exit(USAGE, f"{self.prog}: error: {message} (see --help)\n")
        raise AssertionError("argparse's exit() returned")  # for the type checker


def _bounded(kind: type[int] | type[float], low: float, high: float | None) -> Any:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < low or (high is not None and value > high):
            bound = f"{low:g} to {high:g}" if high is not None else f">= {low:g}"
            raise argparse.ArgumentTypeError(f"{text!r} is out of range ({bound})")
        return value

    return parse


class Command(BaseCommand):
    help = "pgenough for this project: `worker` runs the tasks of the installed apps."
    # pgenough's own configuration is checked first, into one line (exit 2); then the
    # project's system checks run as for any command (``worker``).
    requires_system_checks: list[str] = []

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        self._base_arguments: list[tuple[tuple[str, ...], dict[str, Any]]] = []
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.error = functools.partial(_OneLineParser.error, parser)
        return parser

    def add_base_argument(self, parser: CommandParser, *args: str, **kwargs: Any) -> None:
        """Django's options of every command (``--settings``, ``--pythonpath``, ``-v``...),
        noted to be given to ``worker`` too: argparse hands what follows a subcommand to
        its parser alone, and ``manage.py pgenough worker --settings X`` is how a project
        that adds ``--settings`` to its commands writes it."""
        super().add_base_argument(parser, *args, **kwargs)
        if kwargs.get("action") != "version":
            self._base_arguments.append((args, kwargs))

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(
            dest="pgenough_command", metavar="COMMAND", parser_class=_OneLineParser
        )
        commands.required = True
        run = commands.add_parser(
            "worker",
            help="Run the tasks of every installed app's tasks.py (and django.tasks').",
            description="Run the project's tasks: one executor per queue. SIGTERM lets running"
            " jobs finish (up to the shutdown timeout). Defaults: settings.PGENOUGH.",
        )
        run.add_argument(
            "--queue",
            "-q",
            action="append",
            metavar="QUEUE[=N]",
            help=f"QUEUE or QUEUE=CONCURRENCY (1..{MAX_CONCURRENCY}); repeat. Default:"
            " PGENOUGH['QUEUES'], else every queue of the project's tasks.",
        )
        run.add_argument(
            "--concurrency",
            type=_bounded(int, 1, MAX_CONCURRENCY),
            help=f"Jobs run at once per queue, 1..{MAX_CONCURRENCY}.",
        )
        run.add_argument(
            "--batch-size",
            type=_bounded(int, 1, MAX_BATCH_SIZE),
            help=f"Most jobs taken by one claim, 1..{MAX_BATCH_SIZE}.",
        )
        run.add_argument(
            "--shutdown-timeout",
            type=_bounded(float, 0, None),
            help="On SIGTERM, seconds running jobs get to finish.",
        )
        run.add_argument(
            "--until-idle", action="store_true", help="Drain every claimable job, then exit."
        )
        run.add_argument(
            "--metrics-port",
            type=_bounded(int, 0, 65535),
            help="Serve Prometheus metrics at /metrics on this port.",
        )
        django_options = run.add_argument_group("Django's options (as before `worker`)")
        for args, kwargs in self._base_arguments:
            # SUPPRESS: unless given here, the value parsed before `worker` (or its
            # default) stays; a default here would overwrite it.
            django_options.add_argument(*args, **{**kwargs, "default": argparse.SUPPRESS})

    def handle(self, *args: Any, **options: Any) -> None:
        if options["pgenough_command"] == "worker":
            self.worker(options)

    def worker(self, options: dict[str, Any]) -> None:
        try:
            settings = conf.get_settings()
            db.conninfo(settings.database)
            queues = parse_queues(options["queue"]) if options["queue"] else settings.queues
        except (ImproperlyConfigured, ValueError) as exc:
            raise CommandError(str(exc), returncode=USAGE) from None
        self.check()
        config = WorkerConfig(
            concurrency=options["concurrency"] or settings.concurrency,
            batch_size=options["batch_size"] or settings.batch_size,
            shutdown_timeout=(
                settings.shutdown_timeout
                if options["shutdown_timeout"] is None
                else options["shutdown_timeout"]
            ),
        )
        port = settings.metrics_port if options["metrics_port"] is None else options["metrics_port"]
        if port is not None:
            self._serve_metrics(settings.metrics_host, port)
        spec = worker.WorkerRun(
            alias=settings.database,
            queues=queues,
            concurrency=config.concurrency,
            config=config,
            until_idle=options["until_idle"],
        )
        try:
            asyncio.run(worker.run(spec, lambda line: self.stderr.write(line)))
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc), returncode=USAGE) from None
        except PgenoughError as exc:
            raise CommandError(str(exc)) from None
        except KeyboardInterrupt:
            raise SystemExit(130) from None

    def _serve_metrics(self, host: str, port: int) -> None:
        import prometheus_client

        try:
            server, _ = prometheus_client.start_http_server(port, addr=host)
        except OSError as exc:
            raise CommandError(f"metrics: cannot listen on {host}:{port}: {exc.strerror}") from None
        self.stderr.write(f"metrics at http://{host}:{server.server_port}/metrics")
