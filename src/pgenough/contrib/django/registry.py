"""The project's one pgenough ``App``: the tasks of every installed app's ``tasks.py`` are
registered on it (``@app.task``), as Celery's ``shared_task`` does, and ``manage.py pgenough
worker`` runs it."""

from pgenough.core import App

app = App()
