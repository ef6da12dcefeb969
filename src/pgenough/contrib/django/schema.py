"""The schema tracks ``manage.py migrate`` brings up to date after the core's: the
``django.tasks`` backend's results table, and nothing of the plan service."""

from collections.abc import Sequence

from pgenough.contrib.django.results import TRACK as TASK_RESULTS
from pgenough.core.migrations import MigrationSet

MIGRATIONS: Sequence[MigrationSet] = (TASK_RESULTS,)
