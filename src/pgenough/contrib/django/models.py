"""Read-only Django models over the queue's own table, for the admin.

``pgenough.jobs`` belongs to pgenough's schema (its migrations, applied by this app's
``0001_initial``), so the models are unmanaged: Django never creates, alters or flushes it.
A completed job's row is deleted, so these show what is still queued, running, dead or
cancelled. ``QueuePause`` shows the paused queues (``pgenough.queue_pauses``). The custom
permissions guard the admin's actions.
"""

from __future__ import annotations

from django.db import models

from pgenough.core.admin import JOB_STATES, JobState


class Job(models.Model):
    id = models.BigIntegerField(primary_key=True)
    queue = models.TextField()
    kind = models.TextField()
    payload = models.JSONField(null=True)
    priority = models.IntegerField()
    state = models.TextField(choices=[(s.value, s.value) for s in JOB_STATES])
    attempts = models.IntegerField()
    max_attempts = models.IntegerField()
    run_at = models.DateTimeField()
    created_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True)
    lease_until = models.DateTimeField(null=True)
    worker = models.TextField(null=True)
    finished_at = models.DateTimeField(null=True)
    dedupe_key = models.TextField(null=True)
    last_error = models.TextField(null=True)
    errors = models.JSONField()

    class Meta:
        managed = False
        db_table = 'pgenough"."jobs'  # schema-qualified: Django quotes it as "pgenough"."jobs"
        ordering = ("-id",)
        default_permissions = ("view",)
        permissions = (
            ("retry_job", "Can retry a job (run it again now)"),
            ("discard_job", "Can discard a job (cancel it)"),
            ("pause_queue", "Can pause and resume a queue"),
        )

    def __str__(self) -> str:
        return f"{self.kind} #{self.id} ({self.state})"


class DeadJobManager(models.Manager["DeadJob"]):
    def get_queryset(self) -> models.QuerySet[DeadJob]:
        return super().get_queryset().filter(state=JobState.DEAD.value)


class DeadJob(Job):
    """The dead letters: jobs whose attempts are spent or whose task gave up."""

    objects = DeadJobManager()

    class Meta:
        proxy = True
        verbose_name = "dead letter"
        default_permissions = ("view",)


class QueuePause(models.Model):
    """A paused queue: no worker claims its jobs until it is resumed."""

    queue = models.TextField(primary_key=True)
    paused_at = models.DateTimeField()
    reason = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = 'pgenough"."queue_pauses'
        ordering = ("queue",)
        verbose_name = "paused queue"
        default_permissions = ("view",)

    def __str__(self) -> str:
        return str(self.queue)
