"""The shop's tasks: registered on the project's shared pgenough app."""

from django.db.models import F

from pgenough.contrib.django import app
from shop.models import Order


@app.task(queue="emails")
def send_receipt(order_id: int) -> None:
    # A plain function runs in a worker thread: the ORM as in a view.
    Order.objects.filter(id=order_id).update(receipts=F("receipts") + 1)


@app.task
async def ship(order_id: int) -> None:
    # An async task uses Django's async ORM.
    await Order.objects.filter(id=order_id).aupdate(shipped=True)


@app.task
def set_total(order_id: int, total_cents: int) -> None:
    """For the tests: a total past the integer column's range is a database error."""
    Order.objects.filter(id=order_id).update(total_cents=total_cents)


@app.task(queue="slow")
def slow_receipt(order_id: int, seconds: float) -> None:
    """For the SIGTERM test: says it started, works ``seconds``, then counts its receipt."""
    import threading
    import time

    print(f"slow_receipt {order_id} started in {threading.current_thread().name}", flush=True)
    time.sleep(seconds)
    send_receipt(order_id)
