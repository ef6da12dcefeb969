from asgiref.sync import sync_to_async
from django.db import transaction
from django.http import HttpRequest, JsonResponse

from pgenough.core.orm import django_connection
from shop.models import Order
from shop.tasks import send_receipt


def place_order(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():
        order = Order.objects.create(email=request.GET["email"], total_cents=1250)
        # The job commits with the order, or not at all.
        send_receipt.enqueue(django_connection(), order_id=order.id)
    return JsonResponse({"order": order.id})


def _place(email: str) -> int:
    with transaction.atomic():
        order = Order.objects.create(email=email, total_cents=990)
        send_receipt.enqueue(django_connection(), order_id=order.id)
    return order.id


async def aplace_order(request: HttpRequest) -> JsonResponse:
    # Django's transactions are sync only: the atomic block runs in a thread of its own.
    order_id = await sync_to_async(_place)(request.GET["email"])
    return JsonResponse({"order": order_id})
