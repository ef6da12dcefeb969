"""The project plus an app whose tasks.py made a pgenough App of its own."""

from proj.settings import *  # noqa: F403
from proj.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "legacy"]
