"""Django tasks, declared as any Django project declares them (Django 6's ``django.tasks``,
or the ``django_tasks`` backport on Django 5.2), enqueued through pgenough's backend."""

from typing import Any

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task

from django.db import connection

from pgenough.core import RetryIn
from pgenough.core.admin import discard_job
from pgenough.core.orm import django_connection
from reports.models import Report


@task
def noop(*args: Any, **kwargs: Any) -> None:
    pass


@task
async def noop_async(*args: Any, **kwargs: Any) -> None:
    pass


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def write_report(name: str) -> int:
    """The ORM, in the worker's thread."""
    return Report.objects.create(name=name).pk


@task
async def write_report_async(name: str) -> int:
    """The ORM's async API, from an ``async def`` task."""
    report = await Report.objects.acreate(name=name)
    return report.pk


@task(queue_name="reports", priority=10)
def urgent(name: str) -> None:
    Report.objects.create(name=name)


@task(takes_context=True)
def look_at_myself(context: Any) -> dict[str, Any]:
    """What the task's context says, and what ``get_result`` says while it runs."""
    seen = look_at_myself.get_result(context.task_result.id)
    return {
        "id": context.task_result.id,
        "attempt": context.attempt,
        "status_seen": seen.status,
    }


@task(takes_context=True)
def retry_once(context: Any) -> int:
    if context.attempt == 1:
        raise RetryIn(0, "asked for a second attempt")
    return int(context.attempt)


@task
def fail() -> None:
    raise ValueError("This task failed due to ValueError")


@task
def too_long_a_name() -> None:
    """A database error in the task: the name is longer than its column."""
    Report.objects.create(name="x" * 101)


@task
def exit_() -> None:
    raise SystemExit("This task failed due to SystemExit")


@task
def not_json() -> dict[str, Any]:
    return {"value": object()}


@task
def not_a_number() -> float:
    return float("nan")


@task
def always_retry() -> None:
    raise RetryIn(0, "never done")


@task(takes_context=True)
def discarded_while_running(context: Any) -> str:
    """An operator cancels the job while it runs (``pgenough discard ID``)."""
    discard_job(django_connection(), int(context.task_result.id))
    return "done"


@task
def lose_the_connection() -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(pg_backend_pid())")
