from django.db import models


class Report(models.Model):
    """What the tasks write through the ORM, from a worker's thread."""

    name = models.CharField(max_length=100)
    created = models.DateTimeField(auto_now_add=True)
