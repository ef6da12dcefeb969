"""Django's Tasks framework, wherever this install has it: ``django.tasks`` (Django >= 6.0),
else the ``django-tasks`` backport (``django_tasks``, for Django 5.2 on Python 3.11), else
nothing (``PACKAGE`` is None and the names below are unset).

The two spell a few names differently (``InvalidTask`` is the backport's
``InvalidTaskError``); here each has one name, so ``backend.py`` is written once for both.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

INSTALL_HINT = (
    "pgenough's django.tasks backend needs Django's Tasks framework: Django >= 6.0, or on"
    " Django 5.2 the backport django-tasks (pip install django-tasks; pgenough's django"
    " extra brings it)"
)


def _find() -> str | None:
    for name in ("django.tasks", "django_tasks"):
        try:
            import_module(name)
        except ImportError:
            continue
        return name
    return None


PACKAGE = _find()
"""The importable framework's package: ``django.tasks``, ``django_tasks`` or None."""

BaseTaskBackend: Any
Task: Any
TaskContext: Any
TaskError: Any
TaskResult: Any
TaskResultStatus: Any
InvalidTask: Any
"""Django's error for a task the backend refuses (the backport's ``InvalidTaskError``)."""
TaskResultDoesNotExist: Any
task_backends: Any
task_enqueued: Any
task_started: Any
task_finished: Any
normalize_json: Any
"""Django's own JSON rule for arguments and return values (``TypeError`` on the rest)."""


def _get(module: str, name: str) -> Any:
    return getattr(import_module(module), name)


if PACKAGE is not None:
    BaseTaskBackend = _get(f"{PACKAGE}.backends.base", "BaseTaskBackend")
    Task = _get(f"{PACKAGE}.base", "Task")
    TaskContext = _get(f"{PACKAGE}.base", "TaskContext")
    TaskError = _get(f"{PACKAGE}.base", "TaskError")
    TaskResult = _get(f"{PACKAGE}.base", "TaskResult")
    TaskResultStatus = _get(f"{PACKAGE}.base", "TaskResultStatus")
    InvalidTask = _get(
        f"{PACKAGE}.exceptions", "InvalidTask" if PACKAGE == "django.tasks" else "InvalidTaskError"
    )
    TaskResultDoesNotExist = _get(f"{PACKAGE}.exceptions", "TaskResultDoesNotExist")
    task_backends = _get(PACKAGE, "task_backends")
    task_enqueued = _get(f"{PACKAGE}.signals", "task_enqueued")
    task_started = _get(f"{PACKAGE}.signals", "task_started")
    task_finished = _get(f"{PACKAGE}.signals", "task_finished")
    normalize_json = _get(
        "django.utils.json" if PACKAGE == "django.tasks" else "django_tasks.utils",
        "normalize_json",
    )
