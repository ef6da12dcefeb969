"""The test project's app of Django tasks (``django.tasks``' ``@task``, run by pgenough)."""
