from django.db import models


class Order(models.Model):
    email = models.CharField(max_length=200)

    class Meta:
        app_label = "djangoshop"
        db_table = "django_orders"
