"""A small Django project using pgenough, the shop of docs/guides/django.md grown with what the
suite tests (docs/guides/django.md's own steps run in a new project: test_django_walkthrough.py).

The database comes from PROJECT_DATABASE_URL (else DATABASE_URL), parsed into DATABASES: the
worker's queue is that alias, whatever DATABASE_URL says (the tests point DATABASE_URL
elsewhere for the worker to show it)."""

import os

import django
from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ.get("PROJECT_DATABASE_URL") or os.environ["DATABASE_URL"])

SECRET_KEY = "tests-only"
DEBUG = True
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "proj.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "pgenough.contrib.django",
    "shop",
]
INSTALLED_APPS.append("reports")  # the django.tasks example app
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")  # the backport's app: its system checks

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

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

# pgenough: the queue lives in the "default" database.
PGENOUGH = {
    "DATABASE": "default",
    "CONCURRENCY": 4,
    "SHUTDOWN_TIMEOUT": 10,
}

# django.tasks (Django 6; the django-tasks backport on 5.2): jobs of the pgenough queue, run by
# `manage.py pgenough worker`, their results in the same database (docs/guides/django-tasks.md).
TASKS = {
    "default": {
        "BACKEND": "pgenough.contrib.django.backend.PgenoughBackend",
        "QUEUES": ["default", "reports"],
        "OPTIONS": {"DATABASE": "default"},
    }
}

# The worker's line per job (docs/guides/django-tasks.md, "The worker's log"): failures show without
# this; the INFO line of each job done shows with it.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "pgenough": {"handlers": ["console"], "level": "WARNING"},
        "pgenough.jobs": {"level": "INFO"},  # one line per job; "WARNING": failures only
    },
}
