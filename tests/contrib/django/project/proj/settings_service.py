"""The project with its database named by a libpq service (``PGSERVICEFILE``), as
production settings often do, plus a SQLite alias the queue cannot live in: the tests of
``pgenough.contrib.django.db`` run the worker with these."""

import os

from proj.settings import *  # noqa: F403
from proj.settings import PGENOUGH

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "",
        "OPTIONS": {"service": "shop", "sslmode": "disable"},
    },
    "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
}

PGENOUGH = {**PGENOUGH, "DATABASE": os.environ.get("SHOP_QUEUE_ALIAS", "default")}
