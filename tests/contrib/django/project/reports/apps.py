from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "reports"

    def ready(self) -> None:
        # In a real project the URLconf's views import the tasks, and so django.tasks, which
        # on Django 6 registers the Tasks framework's system checks (the backend's among
        # them). This project has no views for them: import the tasks here, so that
        # `manage.py check` checks TASKS even where pgenough.contrib.django is not installed.
        from reports import tasks  # noqa: F401
