"""MINIMAL stand-in (djtasks helper) until the djapp helper's settings land: the test
project's database from DATABASE_URL, and the TASKS block (the djtasks helper's)."""

import os

import django
from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ["DATABASE_URL"])

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.get("dbname", ""),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
    }
}

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "pgenough.contrib.django",
    "reports",
]
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")  # the backport's app: its system checks

# -- TASKS: the django.tasks backend (owned by the djtasks helper) -------------------------
TASKS = {
    "default": {
        "BACKEND": "pgenough.contrib.django.backend.PgenoughBackend",
        "QUEUES": ["default", "reports"],
        "OPTIONS": {"DATABASE": "default"},
    }
}
# -- end of TASKS ------------------------------------------------------------------------------
