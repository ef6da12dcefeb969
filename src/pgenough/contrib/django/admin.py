"""The admin's view of the queue: jobs (by state, queue, kind) and the dead letters, read
only, with two actions, "retry" and "discard", each guarded by its own permission
(``pgenough.retry_job``, ``pgenough.discard_job``: give them to the operators' group).

The actions call the core (``retry_job``, ``discard_job``) on Django's connection, so they
do what ``pgenough retry`` and ``pgenough discard`` do, in the admin's transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from pgenough.contrib.django.conf import get_settings
from pgenough.contrib.django.models import DeadJob, Job
from pgenough.core.admin import AttemptError, discard_job, retry_job
from pgenough.core.errors import JobNotFound
from pgenough.core.orm import django_connection


def _apply(
    admin_: JobAdmin,
    request: HttpRequest,
    queryset: QuerySet[Job],
    change: Callable[..., None],
    done: str,
) -> None:
    alias = get_settings().database
    changed, gone = 0, []
    for job_id in queryset.values_list("id", flat=True):
        try:
            with transaction.atomic(using=alias):
                change(django_connection(alias), job_id)
        except JobNotFound:
            gone.append(str(job_id))
        else:
            changed += 1
    if changed:
        admin_.message_user(request, f"{done} {changed} job(s)", messages.SUCCESS)
    if gone:
        admin_.message_user(
            request,
            f"job(s) {', '.join(gone)} could not be {done}: finished, or not in a state"
            " that allows it",
            messages.WARNING,
        )


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "kind",
        "queue",
        "state",
        "attempts",
        "max_attempts",
        "run_at",
        "last_error",
    )
    list_filter: tuple[str, ...] = ("state", "queue")
    search_fields = ("kind",)
    # A job's page: its errors as the failed attempts they are, tracebacks included, rather
    # than as raw JSON.
    exclude = ("errors",)
    readonly_fields = ("failed_attempts",)
    ordering = ("-id",)
    actions = ("retry", "discard")
    list_per_page = 50
    show_full_result_count = False  # a count(*) of a long queue on every page is not free

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return super().get_queryset(request).using(get_settings().database)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("pgenough.retry_job"))

    def has_discard_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("pgenough.discard_job"))

    @admin.display(description="failed attempts")
    def failed_attempts(self, obj: Job) -> str:
        """Each recorded failure, oldest first: attempt, time, worker, error, and the
        traceback the newest ones keep, preformatted (every value escaped)."""
        attempts = [AttemptError.from_entry(e) for e in obj.errors or []]
        if not attempts:
            return "none recorded"
        shown: str = format_html_join(
            "",
            '<div class="pgenough-attempt"><p><strong>attempt {}</strong> · {} · {}</p>'
            '<pre style="white-space: pre-wrap">{}</pre>{}</div>',
            (
                (
                    "?" if e.attempt is None else e.attempt,
                    "?" if e.at is None else e.at.isoformat(),
                    e.worker or "unknown worker",
                    e.error,
                    format_html(
                        '<pre class="pgenough-traceback" style="white-space: pre-wrap">{}</pre>',
                        e.traceback,
                    )
                    if e.traceback
                    else "",
                )
                for e in attempts
            ),
        )
        return shown

    @admin.action(permissions=["retry"], description="Retry the selected jobs now")
    def retry(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        _apply(self, request, queryset, retry_job, "retried")

    @admin.action(permissions=["discard"], description="Discard (cancel) the selected jobs")
    def discard(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        _apply(self, request, queryset, discard_job, "discarded")


@admin.register(DeadJob)
class DeadJobAdmin(JobAdmin):
    list_filter = ("queue",)
