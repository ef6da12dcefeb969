from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "reports"

    def ready(self) -> None:
        # STAND-IN until pgenough.contrib.django's AppConfig.ready() imports the backend:
        # on Django 6 Django's Tasks checks are registered only once django.tasks is
        # imported, which the backend module does (and the worker command needs it anyway).
        import pgenough.contrib.django.backend  # noqa: F401
