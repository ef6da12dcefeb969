"""pgenough's schema brought up to date again (core migration 0004: the workers, the queues'
history, the periodic tasks' last run and missed ticks), as 0001 describes: the same function,
which applies only what is missing."""

from __future__ import annotations

from django.db import migrations

from pgenough.contrib.django.migrations import _schema


class Migration(migrations.Migration):
    dependencies = [("pgenough", "0001_initial")]

    operations = [
        migrations.RunPython(_schema.apply_schema, migrations.RunPython.noop, elidable=False),
    ]
