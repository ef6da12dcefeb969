"""The Django app: ``INSTALLED_APPS += ["pgenough.contrib.django"]`` (label ``pgenough``)."""

from __future__ import annotations

from django.apps import AppConfig


class PgenoughConfig(AppConfig):
    name = "pgenough.contrib.django"
    label = "pgenough"
    verbose_name = "pgenough"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        from pgenough.contrib.django import checks

        checks.register()
        # Every process (web, shell, test runner, worker) imports each installed app's
        # tasks.py, so the shared app knows every task wherever jobs are run from.
        autodiscover_modules("tasks")
        # The django.tasks backend's one task, on the shared app wherever jobs run; and on
        # Django 6 its system checks are registered once django.tasks is imported, which
        # the backend module does (it imports without a Tasks framework too).
        import pgenough.contrib.django.backend  # noqa: F401
