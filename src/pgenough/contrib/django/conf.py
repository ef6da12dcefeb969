"""The ``PGENOUGH`` setting of settings.py, read once into ``PgenoughSettings``::

    PGENOUGH = {
        "DATABASE": "default",                  # the DATABASES alias of the queue
        "QUEUES": {"emails": 4, "default": None},  # or ["emails=4", "default"]; None: all
        "CONCURRENCY": 10,                      # jobs at once per queue
        "BATCH_SIZE": 10,                       # jobs taken by one claim
        "SHUTDOWN_TIMEOUT": 30.0,               # seconds running jobs get on SIGTERM
        "METRICS_PORT": None,                   # the worker's Prometheus /metrics port
        "METRICS_HOST": "127.0.0.1",
    }

Every key is optional; the defaults are the core worker's own (``pgenough.core.worker``).
``manage.py pgenough worker`` options override them. A wrong key or value is an
``ImproperlyConfigured`` naming it, reported by ``manage.py check`` (``pgenough.E001``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from pgenough.core.worker import DEFAULT_BATCH_SIZE, DEFAULT_CONCURRENCY, DEFAULT_SHUTDOWN_TIMEOUT
from pgenough.core.worker.config import MAX_BATCH_SIZE, MAX_CONCURRENCY, parse_queues

SETTING = "PGENOUGH"


@dataclass(frozen=True)
class PgenoughSettings:
    database: str = "default"
    queues: dict[str, int | None] | None = None
    """Queue name to its concurrency (None: ``concurrency``); None: every queue of the
    project's tasks and of the django.tasks backend."""
    concurrency: int = DEFAULT_CONCURRENCY
    batch_size: int = DEFAULT_BATCH_SIZE
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"


KEYS = tuple(f.name.upper() for f in fields(PgenoughSettings))


def get_settings() -> PgenoughSettings:
    """``settings.PGENOUGH``, checked; ``ImproperlyConfigured`` saying what is wrong."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    raw = getattr(settings, SETTING, None) or {}
    try:
        return parse(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"settings.{SETTING}: {exc}") from None


def parse(raw: Any) -> PgenoughSettings:
    """The settings of a ``PGENOUGH`` dict; ``ValueError`` naming the bad key."""
    if not isinstance(raw, dict):
        raise ValueError(f"must be a dict, not {type(raw).__name__}")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)}; known: {', '.join(KEYS)}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        values[key.lower()] = _CHECKS[key](key, value)
    return PgenoughSettings(**values)


def _alias(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key} must be a DATABASES alias (a string), not {value!r}")
    return value


def _queues(key: str, value: Any) -> dict[str, int | None] | None:
    if value is None:
        return None
    if isinstance(value, dict):
        items = [name if n is None else f"{name}={n}" for name, n in value.items()]
        if not all(isinstance(name, str) for name in value):
            raise ValueError(f"{key}: queue names are strings")
    elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        items = list(value)
    else:
        raise ValueError(f"{key} must be a list of NAME or NAME=N, or a dict NAME: N")
    try:
        return parse_queues(items)
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}") from None


def count(key: str, value: Any, top: int | None = MAX_CONCURRENCY) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be a whole number >= 1, not {value!r}")
    if top is not None and value > top:
        raise ValueError(f"{key} must be at most {top}, not {value}")
    return value


def seconds(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{key} must be finite and >= 0, not {value!r}")
    return float(value)


def port(key: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ValueError(f"{key} must be a port, 0 to 65535, not {value!r}")
    return value


def _host(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key} must be an address, not {value!r}")
    return value


_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "DATABASE": _alias,
    "QUEUES": _queues,
    "CONCURRENCY": count,
    "BATCH_SIZE": lambda key, value: count(key, value, top=MAX_BATCH_SIZE),
    "SHUTDOWN_TIMEOUT": seconds,
    "METRICS_PORT": port,
    "METRICS_HOST": _host,
}
