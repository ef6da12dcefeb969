"""pgenough for Django projects: ``INSTALLED_APPS += ["pgenough.contrib.django"]``.

The app brings the queue's schema into ``manage.py migrate``, takes its connection from a
``DATABASES`` alias, runs workers with ``manage.py pgenough worker``, shows jobs in the admin,
and offers a ``django.tasks`` backend. ``docs/guides/django.md`` is its manual.

Nothing here imports Django models at import time: ``app`` may be imported from any
``tasks.py``.
"""

from pgenough.contrib.django.registry import app

__all__ = ["app"]
