"""pgenough's schema, in ``manage.py migrate`` (and so in every test database Django makes).

The schema is pgenough's own, versioned by its migrations (``pgenough.core.migrate``), not
by Django's: this migration applies them, the core's then each of ``schema.MIGRATIONS``, on
the migration's own connection and in its transaction, for the ``PGENOUGH["DATABASE"]``
alias only. A later pgenough brings its new SQL migrations through ``0002_...`` migrations
of this app that run the same function (it applies only what is missing).

Reversing it (``manage.py migrate pgenough zero``) leaves the schema and its jobs in place,
on purpose: unapplying a Django migration should never drop a queue's unfinished work. Drop
it by hand once the queue is empty: ``DROP SCHEMA pgenough CASCADE``.

The models are unmanaged (``models.py``): their operations record Django's state only.
"""

from __future__ import annotations

from django.db import migrations, models

from pgenough.contrib.django.migrations._schema import apply_schema


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.RunPython(apply_schema, migrations.RunPython.noop, elidable=False),
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("queue", models.TextField()),
                ("kind", models.TextField()),
                ("payload", models.JSONField(null=True)),
                ("priority", models.IntegerField()),
                (
                    "state",
                    models.TextField(
                        choices=[
                            ("ready", "ready"),
                            ("running", "running"),
                            ("dead", "dead"),
                            ("cancelled", "cancelled"),
                        ]
                    ),
                ),
                ("attempts", models.IntegerField()),
                ("max_attempts", models.IntegerField()),
                ("run_at", models.DateTimeField()),
                ("created_at", models.DateTimeField()),
                ("claimed_at", models.DateTimeField(null=True)),
                ("lease_until", models.DateTimeField(null=True)),
                ("worker", models.TextField(null=True)),
                ("finished_at", models.DateTimeField(null=True)),
                ("dedupe_key", models.TextField(null=True)),
                ("last_error", models.TextField(null=True)),
                ("errors", models.JSONField()),
            ],
            options={
                "db_table": 'pgenough"."jobs',
                "ordering": ("-id",),
                "permissions": (
                    ("retry_job", "Can retry a job (run it again now)"),
                    ("discard_job", "Can discard a job (cancel it)"),
                ),
                "managed": False,
                "default_permissions": ("view",),
            },
        ),
        migrations.CreateModel(
            name="DeadJob",
            fields=[],
            options={
                "verbose_name": "dead letter",
                "proxy": True,
                "default_permissions": ("view",),
                "indexes": [],
                "constraints": [],
            },
            bases=("pgenough.job",),
        ),
    ]
