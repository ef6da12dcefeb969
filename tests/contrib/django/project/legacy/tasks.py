"""A Celery habit: an app of its own in a tasks.py (``manage.py check`` warns, W001)."""

from pgenough.core import App

app = App()


@app.task
def forgotten() -> None:
    """No ``manage.py pgenough worker`` runs this: it is not on the shared app."""
