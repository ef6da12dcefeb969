"""The admin's view of the queue: jobs (by state, queue, kind), the dead letters and the
paused queues, read only, with actions each guarded by its own permission: "retry" and
"discard" (``pgenough.retry_job``, ``pgenough.discard_job``), "pause their queues" on the jobs
and "resume" on the paused queues (``pgenough.pause_queue``): give them to the operators'
group.

The actions call the core (``retry_job``, ``discard_job``, ``pause_queue``,
``resume_queue``) on Django's connection, so they do what ``pgenough retry``, ``discard``,
``pause`` and ``resume`` do, in the admin's transaction.
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
from pgenough.contrib.django.models import DeadJob, Job, QueuePause
from pgenough.core.admin import (
    AttemptError,
    discard_job,
    pause_queue,
    resume_queue,
    retry_job,
)
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


class _ReadOnly(admin.ModelAdmin):
    """pgenough's tables, read on ``PGENOUGH["DATABASE"]``; changed only by the actions."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).using(get_settings().database)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("pgenough.pause_queue"))


@admin.register(Job)
class JobAdmin(_ReadOnly):
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
    actions = ("retry", "discard", "pause_queues")
    list_per_page = 50
    show_full_result_count = False  # a count(*) of a long queue on every page is not free

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

    @admin.action(
        permissions=["pause"],
        description="Pause the queues of the selected jobs (no worker claims their jobs)",
    )
    def pause_queues(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        alias = get_settings().database
        queues = sorted(set(queryset.values_list("queue", flat=True)))
        reason = f"paused from the admin by {request.user.get_username()}"
        with transaction.atomic(using=alias):
            paused = [q for q in queues if pause_queue(django_connection(alias), q, reason=reason)]
        if paused:
            self.message_user(request, f"paused queue(s) {', '.join(paused)}", messages.SUCCESS)
        if already := [q for q in queues if q not in paused]:
            self.message_user(request, f"already paused: {', '.join(already)}", messages.INFO)


@admin.register(DeadJob)
class DeadJobAdmin(JobAdmin):
    list_filter = ("queue",)


@admin.register(QueuePause)
class QueuePauseAdmin(_ReadOnly):
    list_display = ("queue", "paused_at", "reason")
    actions = ("resume",)

    @admin.action(permissions=["pause"], description="Resume the selected queues")
    def resume(self, request: HttpRequest, queryset: QuerySet[QueuePause]) -> None:
        alias = get_settings().database
        queues = list(queryset.values_list("queue", flat=True))
        with transaction.atomic(using=alias):
            resumed = [q for q in queues if resume_queue(django_connection(alias), q)]
        if resumed:
            self.message_user(request, f"resumed queue(s) {', '.join(resumed)}", messages.SUCCESS)
