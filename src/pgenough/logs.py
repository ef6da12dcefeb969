"""Log output of the ``pgenough`` command: text for people, JSON lines for log shippers.

Both formats carry the log context (``pgenough.core.logcontext.log_context``): ``run_id`` and
``provider`` while a run is fetched or processed, ``job_id`` and ``queue`` while a job is
handled, ``request_id`` while an API request is answered. A JSON line is one object::

    {"ts": "2026-01-31T12:00:00.123Z", "level": "INFO", "logger": "pgenough_plans.ingest.fetch",
     "message": "run 7: fetching ...", "run_id": 7, "provider": "fever"}

with ``exc_info`` (the formatted traceback, a string) when an exception is logged.

A log line is one line whatever it quotes. Messages carry text from outside (a provider's URL,
a reason, an exception's message, a request path), so a text line writes control characters
and line separators as escapes (``\\n``, ``\\x1b``, ``\\u2028``): a URL with a newline in it
cannot start a forged line of its own. Only a traceback, after the line, spans lines. A JSON
line escapes them too, including the separators ``json`` itself leaves raw.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Final, Literal, TextIO

from pgenough.core.logcontext import current_log_context

LogFormat = Literal["text", "json"]
CONTEXT_ATTR: Final = "pgenough_context"
TEXT_FORMAT: Final = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# Keys of the JSON object that a context field may not replace.
_RESERVED: Final = frozenset({"ts", "level", "logger", "message", "exc_info", "stack_info"})
# What ends a line (for str.splitlines too: \x1c-\x1e, \x85, U+2028, U+2029) or drives a
# terminal (ESC): C0 and C1 controls, and the Unicode line and paragraph separators.
_UNSAFE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# What json.dumps(ensure_ascii=False) leaves raw of those (it escapes C0 itself).
_JSON_UNSAFE: Final = re.compile(r"[\x7f-\x9f\u2028\u2029]")
# A context value written as is; any other is quoted, so that it reads as one field.
_BARE: Final = re.compile(r"[^\s\"=\[\]]+")


def escape_controls(text: str) -> str:
    """``text`` on one line: control characters and line separators as Python escapes."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _field(value: object) -> str:
    text = str(value)
    return escape_controls(text if _BARE.fullmatch(text) else json.dumps(text, ensure_ascii=False))


class ContextFilter(logging.Filter):
    """Copies the log context onto each record as it is emitted, in the emitting task (a
    formatter may run later, elsewhere, when a queue handler sits in between)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, CONTEXT_ATTR):
            setattr(record, CONTEXT_ATTR, current_log_context())
        return True


def _context(record: logging.LogRecord) -> dict[str, object]:
    return dict(getattr(record, CONTEXT_ATTR, None) or {})


class TextFormatter(logging.Formatter):
    """The classic line, escaped to stay one line, then the context as ``[key=value ...]``."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        # The line only: format() appends the traceback after it, with its own lines.
        return escape_controls(super().formatMessage(record))

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = _context(record)
        if not context:
            return line
        fields = " ".join(f"{k}={_field(v)}" for k, v in context.items())
        head, sep, rest = line.partition("\n")  # the context belongs to the message, not the trace
        return f"{head} [{fields}]{sep}{rest}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line; line breaks inside the message or traceback are escaped."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        entry: dict[str, object] = {
            "ts": f"{ts}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _context(record).items():
            entry[key if key not in _RESERVED else f"ctx_{key}"] = value
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        line = json.dumps(entry, default=str, ensure_ascii=False)
        # They can only be inside strings, where \uXXXX means the same character.
        return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", line)


def setup(level: str, fmt: LogFormat = "text", *, stream: TextIO | None = None) -> None:
    """Send every log line to ``stream`` (stderr) in ``fmt``; like ``logging.basicConfig``,
    a no-op when the root logger already has a handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    logging.basicConfig(level=level, handlers=[handler])
    # Neither format shows the caller, the thread or the process: not looked up for each
    # record (the logging HOWTO's "Optimization"), which the worker writes one of per job.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
