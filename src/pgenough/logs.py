"""Log output of the ``pgenough`` command: text for people, JSON lines for log shippers.

Both formats carry the log context (``pgenough.core.log_context``): ``run_id`` and
``provider`` while a run is fetched or processed, ``job_id`` and ``queue`` while a job is
handled, ``request_id`` while an API request is answered. A JSON line is one object::

    {"ts": "2026-01-31T12:00:00.123Z", "level": "INFO", "logger": "pgenough.plans.fetch",
     "message": "run 7: fetching ...", "run_id": 7, "provider": "fever"}

with ``exc_info`` (the formatted traceback, a string) when an exception is logged.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Final, Literal, TextIO

from pgenough.core import current_log_context

LogFormat = Literal["text", "json"]
CONTEXT_ATTR: Final = "pgenough_context"
TEXT_FORMAT: Final = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# Keys of the JSON object that a context field may not replace.
_RESERVED: Final = frozenset({"ts", "level", "logger", "message", "exc_info", "stack_info"})


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
    """The classic line, then the context as ``[key=value ...]``."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = _context(record)
        if not context:
            return line
        fields = " ".join(f"{k}={v}" for k, v in context.items())
        head, sep, rest = line.partition("\n")  # the context belongs to the message, not the trace
        return f"{head} [{fields}]{sep}{rest}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line; newlines inside the message or traceback are escaped."""

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
        return json.dumps(entry, default=str, ensure_ascii=False)


def setup(level: str, fmt: LogFormat = "text", *, stream: TextIO | None = None) -> None:
    """Send every log line to ``stream`` (stderr) in ``fmt``; like ``logging.basicConfig``,
    a no-op when the root logger already has a handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    logging.basicConfig(level=level, handlers=[handler])
