from django.db import models


class Order(models.Model):
    email = models.EmailField()
    total_cents = models.IntegerField()
    shipped = models.BooleanField(default=False)
    receipts = models.IntegerField(default=0)
    """Receipts sent: the tests count each run of ``send_receipt``."""
