"""Log lines: JSON objects (or text) carrying the context of the run, job or request that
wrote them, and never a database password."""

from __future__ import annotations

import json
import logging

from pgenough.core.logcontext import bind_log_context, log_context
from pgenough.logs import ContextFilter, JsonFormatter, TextFormatter
from tests.test_cli import pgenough

PASSWORD = "s3cret-Pa55"


def record(message: str, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc else None
    rec = logging.LogRecord("pgenough.test", logging.WARNING, __file__, 1, message, (), exc_info)
    ContextFilter().filter(rec)
    return rec


def test_a_json_line_is_one_object_with_the_context() -> None:
    with log_context(run_id=7, provider="fever"):
        bind_log_context(job_id=3)
        rec = record("two\nlines")
    try:
        raise ValueError("boom")
    except ValueError as exc:
        failed = record("failed", exc)
    line = JsonFormatter().format(rec)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == "two\nlines"
    assert (entry["level"], entry["logger"]) == ("WARNING", "pgenough.test")
    assert (entry["run_id"], entry["provider"], entry["job_id"]) == (7, "fever", 3)
    assert entry["ts"].endswith("Z")
    trace = json.loads(JsonFormatter().format(failed))["exc_info"]
    assert isinstance(trace, str) and "ValueError: boom" in trace


def test_context_scopes_nest_and_close() -> None:
    with log_context(request_id="a"):
        with log_context(run_id=1):
            inner = record("inner")
        outer = record("outer")
    bind_log_context(run_id=2)  # no scope: nothing to add to
    after = record("after")
    assert TextFormatter().format(inner).endswith("inner [request_id=a run_id=1]")
    assert TextFormatter().format(outer).endswith("outer [request_id=a]")
    assert TextFormatter().format(after).endswith("after")


# Every character that ends a line for str.splitlines(), and ESC, which drives a terminal.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x1b"


def test_a_text_line_stays_one_line_whatever_its_message_quotes() -> None:
    forged = "".join(f"{c}2026-01-01 00:00:00,000 ERROR   forged" for c in LINE_BREAKS)
    with log_context(provider="a b", run_id=1, note="x\ny"):
        rec = record(f"fetching from http://h/{forged}")
    line = TextFormatter().format(rec)
    assert line.splitlines() == [line]
    assert "http://h/\\n2026-01-01" in line and "\\u2028" in line and "\\x1b" in line
    # A context value with a space, a quote or a bracket is quoted: it reads as one field.
    assert line.endswith(' [provider="a b" run_id=1 note="x\\ny"]')


def test_a_traceback_keeps_its_lines_after_the_escaped_one() -> None:
    try:
        raise ValueError("boom")
    except ValueError as exc:
        with log_context(run_id=2):
            failed = record("failed at\nhttp://h/", exc)
    head, *trace = TextFormatter().format(failed).splitlines()
    assert head.endswith("failed at\\nhttp://h/ [run_id=2]")
    assert trace[0] == "Traceback (most recent call last):" and trace[-1] == "ValueError: boom"


def test_a_json_line_escapes_what_json_leaves_raw() -> None:
    rec = record(f"a{LINE_BREAKS}b")
    line = JsonFormatter().format(rec)
    assert line.splitlines() == [line]
    assert json.loads(line)["message"] == f"a{LINE_BREAKS}b"
    assert json.loads(JsonFormatter().format(record("prix: 12 €")))["message"] == "prix: 12 €"


# -- the command ------------------------------------------------------------------------------


def test_a_password_in_database_url_is_never_logged(worker_env: dict[str, str]) -> None:
    urls = [
        f"postgresql://app:{PASSWORD}@127.0.0.1:1/nope?connect_timeout=2",
        f"host=127.0.0.1 port=1 user=app password={PASSWORD} connect_timeout=2",
        f"postgresql//app:{PASSWORD}@127.0.0.1:1/nope",  # unparsable: libpq quotes it
    ]
    commands = [
        ["migrate"],
        ["worker", "run", "tests.helpers.taskapp:app", "--until-idle"],
        ["status"],
    ]
    for url in urls:
        env = dict(worker_env, DATABASE_URL=url, PGENOUGH_LOG_LEVEL="DEBUG")
        for command in commands:
            result = pgenough("--log-format", "json", *command, env=env)
            assert result.returncode != 0, (url, command)
            assert PASSWORD not in result.stdout + result.stderr, (url, command, result.stderr)
