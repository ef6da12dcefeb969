"""pgenough's schema brought up to date again (core migration 0005: paused queues), as 0001
describes: the same function, which applies only what is missing; and the admin's view of the
paused queues, with the permission to pause and resume one."""

from __future__ import annotations

from django.db import migrations, models

from pgenough.contrib.django.migrations import _schema


class Migration(migrations.Migration):
    dependencies = [("pgenough", "0002_workers_history")]

    operations = [
        migrations.RunPython(_schema.apply_schema, migrations.RunPython.noop, elidable=False),
        migrations.CreateModel(
            name="QueuePause",
            fields=[
                ("queue", models.TextField(primary_key=True, serialize=False)),
                ("paused_at", models.DateTimeField()),
                ("reason", models.TextField(null=True)),
            ],
            options={
                "verbose_name": "paused queue",
                "db_table": 'pgenough"."queue_pauses',
                "ordering": ("queue",),
                "managed": False,
                "default_permissions": ("view",),
            },
        ),
        migrations.AlterModelOptions(
            name="job",
            options={
                "default_permissions": ("view",),
                "managed": False,
                "ordering": ("-id",),
                "permissions": (
                    ("retry_job", "Can retry a job (run it again now)"),
                    ("discard_job", "Can discard a job (cancel it)"),
                    ("pause_queue", "Can pause and resume a queue"),
                ),
            },
        ),
    ]
