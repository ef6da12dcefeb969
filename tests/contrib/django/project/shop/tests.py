"""The shop's own Django tests (``manage.py test shop``): the test database has pgenough's
schema (its migration ran there), a job commits with the view's transaction, and the admin
shows the queue and guards its actions by permission."""

import html
import json

from django.contrib.auth.models import Permission, User
from django.db import DataError, connection, transaction
from django.test import TestCase, TransactionTestCase

from pgenough.contrib.django import app
from pgenough.contrib.django.models import DeadJob, Job, QueuePause
from pgenough.core.orm import django_connection
from pgenough.core.testing import run_jobs
from shop.models import Order
from shop.tasks import send_receipt, set_total, ship


class EnqueueTests(TestCase):
    def test_a_view_enqueues_in_its_transaction(self) -> None:
        response = self.client.get("/orders/", {"email": "ann@example.com"})
        order_id = response.json()["order"]
        job = Job.objects.get()
        self.assertEqual((job.kind, job.queue, job.state), (send_receipt.name, "emails", "ready"))
        self.assertEqual(job.payload, {"order_id": order_id})

    async def test_an_async_view_enqueues_through_sync_to_async(self) -> None:
        response = await self.async_client.get("/orders/async/", {"email": "bob@example.com"})
        order_id = response.json()["order"]
        job = await Job.objects.aget()
        self.assertEqual(job.payload, {"order_id": order_id})


class RunTheJobsTests(TestCase):
    def test_the_receipt_is_sent(self) -> None:
        self.client.get("/orders/", {"email": "dee@example.com"})
        report = run_jobs(django_connection(), app)  # in this test's transaction
        self.assertEqual(report.completed_kinds, [send_receipt.name])
        self.assertEqual(Order.objects.get().receipts, 1)
        self.assertFalse(Job.objects.exists())  # completed jobs are deleted

    def test_a_failing_task_fails_the_test(self) -> None:
        send_receipt.enqueue(django_connection(), order_id="not a number")
        with self.assertRaises(ValueError):  # the task's own error, re-raised
            run_jobs(django_connection(), app)

    def test_an_async_task_uses_the_tests_connection(self) -> None:
        order = Order.objects.create(email="fay@example.com", total_cents=5)  # uncommitted
        ship.enqueue(django_connection(), order_id=order.id)
        run_jobs(django_connection(), app)
        order.refresh_from_db()
        self.assertTrue(order.shipped)  # its aupdate() saw the order, in this transaction

    def test_a_database_error_of_a_task_leaves_the_test_usable(self) -> None:
        order = Order.objects.create(email="eve@example.com", total_cents=5)
        set_total.enqueue(django_connection(), order_id=order.id, total_cents=2**40)
        with self.assertRaises(DataError):  # integer out of range
            run_jobs(django_connection(), app)
        order.refresh_from_db()  # Django still takes the test's queries
        self.assertEqual(order.total_cents, 5)
        self.assertEqual(Job.objects.get().state, "ready")  # to retry, as on a worker


class CommitTests(TransactionTestCase):
    """Real commits: what another connection sees (the worker's)."""

    def tearDown(self) -> None:
        Job.objects.all().delete()  # unmanaged: Django's flush leaves pgenough's table alone

    def jobs_seen_elsewhere(self) -> int:
        import psycopg

        from pgenough.contrib.django.db import conninfo

        with psycopg.connect(conninfo(connection.alias)) as other:
            row = other.execute("SELECT count(*) FROM pgenough.jobs").fetchone()
        return int(row[0]) if row else 0

    def test_the_job_exists_iff_the_transaction_commits(self) -> None:
        with self.assertRaises(RuntimeError), transaction.atomic():
            order = Order.objects.create(email="cy@example.com", total_cents=5)
            send_receipt.enqueue(django_connection(), order_id=order.id)
            raise RuntimeError("payment refused")
        self.assertEqual(self.jobs_seen_elsewhere(), 0)
        self.client.get("/orders/", {"email": "cy@example.com"})
        self.assertEqual(self.jobs_seen_elsewhere(), 1)


TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/app/shop/tasks.py", line 12, in send_receipt\n'
    "    smtp.send(<b>not markup</b>)\n"
    "SMTPError: 554\n"
)


class AdminTests(TestCase):
    @classmethod
    def setUpTestData(cls) -> None:
        order = Order.objects.create(email="dee@example.com", total_cents=7)
        send_receipt.enqueue(django_connection(), order_id=order.id)
        with connection.cursor() as cur:  # as a worker leaves a job whose attempts are spent
            cur.execute(
                "UPDATE pgenough.jobs SET state = 'dead', attempts = max_attempts,"
                " last_error = %s, errors = %s",
                [
                    "SMTPError: 554",
                    json.dumps(
                        [
                            {"attempt": 1, "error": "SMTPError: 421"},
                            {"attempt": 2, "error": "SMTPError: 554", "traceback": TRACEBACK},
                        ]
                    ),
                ],
            )
        cls.job = Job.objects.get()
        viewing = Permission.objects.filter(
            content_type__app_label="pgenough", codename__in=["view_job", "view_deadjob"]
        )
        cls.viewer = User.objects.create_user("viewer", is_staff=True)
        cls.viewer.user_permissions.set(viewing)
        cls.operator = User.objects.create_user("operator", is_staff=True)
        cls.operator.user_permissions.set(
            [
                *viewing,
                *Permission.objects.filter(
                    codename__in=["retry_job", "discard_job", "pause_queue", "view_queuepause"]
                ),
            ]
        )

    def act(self, user: User, action: str, url: str = "/admin/pgenough/deadjob/") -> str:
        self.client.force_login(user)
        self.client.post(url, {"action": action, "_selected_action": [self.job.id]})
        return Job.objects.get(id=self.job.id).state

    def test_the_pages_render(self) -> None:
        self.client.force_login(self.viewer)
        for url in (
            "/admin/pgenough/job/",
            "/admin/pgenough/job/?state__exact=dead&q=send_receipt",
            "/admin/pgenough/deadjob/",
            f"/admin/pgenough/job/{self.job.id}/change/",
        ):
            with self.subTest(url=url):
                response = self.client.get(url)
                self.assertEqual(response.status_code, 200)
                self.assertContains(response, send_receipt.name)
        detail = self.client.get(f"/admin/pgenough/job/{self.job.id}/change/")
        self.assertContains(detail, "SMTPError: 554")
        self.assertContains(detail, "order_id")
        # Each failed attempt, and the traceback the newest keep, preformatted and escaped.
        self.assertContains(detail, "attempt 1</strong>")
        self.assertContains(detail, "SMTPError: 421")
        self.assertContains(
            detail,
            '<pre class="pgenough-traceback" style="white-space: pre-wrap">'
            + html.escape(TRACEBACK)
            + "</pre>",
        )
        self.assertNotContains(detail, "<b>not markup</b>")
        self.assertEqual(DeadJob.objects.count(), 1)

    def test_no_add_change_or_delete(self) -> None:
        self.client.force_login(self.operator)
        self.assertEqual(self.client.get("/admin/pgenough/job/add/").status_code, 403)
        self.assertNotContains(self.client.get("/admin/pgenough/job/"), "delete_selected")

    def test_retry_needs_its_permission(self) -> None:
        self.assertEqual(self.act(self.viewer, "retry"), "dead")
        self.assertEqual(self.act(self.operator, "retry"), "ready")

    def test_pausing_and_resuming_a_queue_need_their_permission(self) -> None:
        def paused() -> list[str]:
            return list(QueuePause.objects.values_list("queue", flat=True))

        self.act(self.viewer, "pause_queues", "/admin/pgenough/job/")
        self.assertEqual(paused(), [])
        self.act(self.operator, "pause_queues", "/admin/pgenough/job/")
        self.assertEqual(paused(), [self.job.queue])
        self.client.force_login(self.operator)
        page = self.client.get("/admin/pgenough/queuepause/")
        self.assertContains(page, "paused from the admin by operator")
        self.assertEqual(self.client.get("/admin/pgenough/queuepause/add/").status_code, 403)
        selected = {"action": "resume", "_selected_action": [self.job.queue]}
        self.client.force_login(self.viewer)
        self.client.post("/admin/pgenough/queuepause/", selected)
        self.assertEqual(paused(), [self.job.queue])
        self.client.force_login(self.operator)
        self.client.post("/admin/pgenough/queuepause/", selected)
        self.assertEqual(paused(), [])

    def test_discard_needs_its_permission(self) -> None:
        self.assertEqual(self.act(self.viewer, "discard", "/admin/pgenough/job/"), "dead")
        self.assertEqual(self.act(self.operator, "discard", "/admin/pgenough/job/"), "cancelled")
