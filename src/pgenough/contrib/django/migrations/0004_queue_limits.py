"""pgenough's schema brought up to date again (core migration 0006: fleet-wide limits, running
and rate), as 0001 describes: the same function, which applies only what is missing."""

from __future__ import annotations

from django.db import migrations

from pgenough.contrib.django.migrations import _schema


class Migration(migrations.Migration):
    dependencies = [("pgenough", "0003_queue_pauses")]

    operations = [
        migrations.RunPython(_schema.apply_schema, migrations.RunPython.noop, elidable=False),
    ]
