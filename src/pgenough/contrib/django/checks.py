"""``manage.py check``: the ``PGENOUGH`` setting, the queue's database, and tasks modules
that made an ``App`` of their own (whose tasks no ``manage.py pgenough worker`` runs)."""

from __future__ import annotations

import sys
from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from pgenough.contrib.django import conf, db
from pgenough.contrib.django.registry import app
from pgenough.core import App


def register() -> None:
    checks.register(check_settings)
    checks.register(check_own_apps)


def check_settings(**kwargs: Any) -> list[checks.CheckMessage]:
    try:
        db.conninfo(conf.get_settings().database)
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="pgenough.E001")]
    return []


def check_own_apps(**kwargs: Any) -> list[checks.CheckMessage]:
    """A ``tasks.py`` with ``app = App()`` is a Celery habit (one app per project) that
    would silently split the project's tasks: the worker runs the shared app only."""
    from django.apps import apps

    found = []
    for config in apps.get_app_configs():
        module = sys.modules.get(f"{config.name}.tasks")
        for attribute, value in vars(module).items() if module else ():
            if isinstance(value, App) and value is not app:
                found.append(
                    checks.Warning(
                        f"{config.name}.tasks.{attribute} is a pgenough App of its own;"
                        " manage.py pgenough worker runs only the shared one",
                        hint="register tasks with `from pgenough.contrib.django import app`",
                        obj=f"{config.name}.tasks",
                        id="pgenough.W001",
                    )
                )
    return found
