"""pgenough's django.tasks backend, checked the way Django's own backend tests check theirs,
plus what is pgenough's: the job iff the transaction commits, a worker running the tasks.

Run by tests/contrib/django/test_tasks_backend.py as ``manage.py test reports`` on Django 5.2
(the backport) and on Django 6.
"""

import asyncio
import inspect
import traceback
from datetime import timedelta
from typing import Any

import psycopg
from django.core.exceptions import ImproperlyConfigured
from django.db import DataError, connection, transaction
from django.test import TestCase, TransactionTestCase, override_settings
from django.utils import timezone

from pgenough.contrib.django import app
from pgenough.contrib.django import backend as pgenough_backend
from pgenough.contrib.django.db import conninfo
from pgenough.contrib.django.schema import MIGRATIONS
from pgenough.core import get_job, migrate
from pgenough.core.orm import django_connection
from pgenough.core.testing import run_jobs
from reports import tasks
from reports.inprocess import run_until_idle
from reports.models import Report

try:
    from django.tasks import TaskResultStatus, default_task_backend, task, task_backends
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskResultStatus, default_task_backend, task, task_backends
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch


def ensure_pgenough_schema() -> None:
    """The queue's and the results' tables in the test database. A STAND-IN until the djapp
    helper's migrations make ``manage.py test`` create them (then it finds nothing to do)."""

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) as conn:
            await migrate(conn, MIGRATIONS)

    asyncio.run(run())


def job_row(result_id: str) -> Any:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT kind, queue, priority, run_at, payload::text FROM pgenough.jobs WHERE id = %s",
            [int(result_id)],
        )
        return cur.fetchone()


def job_state(result_id: str) -> str | None:
    with connection.cursor() as cur:
        cur.execute("SELECT state::text FROM pgenough.jobs WHERE id = %s", [int(result_id)])
        row = cur.fetchone()
    return None if row is None else str(row[0])


def results_table() -> list[tuple[str, str, str]]:
    """Each result's task, status and first error's class path (None without one)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT task_path, status, errors -> 0 ->> 'exception_class_path'"
            " FROM pgenough.django_task_results ORDER BY id"
        )
        return list(cur.fetchall())


def committed_jobs() -> int:
    """What another session sees: committed jobs only."""
    with psycopg.connect(conninfo()) as other:
        row = other.execute("SELECT count(*) FROM pgenough.jobs").fetchone()
        return int(row[0]) if row else 0


class Schema:
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()  # type: ignore[misc]
        ensure_pgenough_schema()

    def setUp(self) -> None:
        with connection.cursor() as cur:
            cur.execute("TRUNCATE pgenough.jobs, pgenough.django_task_results")


class EnqueueTests(Schema, TestCase):
    def test_using_the_backend(self) -> None:
        backend = task_backends["default"]
        self.assertIsInstance(backend, pgenough_backend.PgenoughBackend)
        self.assertEqual(default_task_backend.alias, "default")
        self.assertEqual(backend.database, "default")
        self.assertTrue(backend.supports_defer)
        self.assertTrue(backend.supports_async_task)
        self.assertTrue(backend.supports_get_result)
        self.assertTrue(backend.supports_priority)

    def test_enqueue_returns_a_ready_result(self) -> None:
        for task in [tasks.noop, tasks.noop_async]:
            with self.subTest(task):
                result = task.enqueue(1, two=3)
                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertTrue(result.id)
                self.assertIs(result.is_finished, False)
                self.assertIsNotNone(result.enqueued_at)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.finished_at)
                self.assertEqual(result.attempts, 0)
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [1])
                self.assertEqual(result.kwargs, {"two": 3})
                self.assertEqual(result.backend, "default")
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value  # noqa: B018

    def test_one_job_of_the_one_pgenough_task(self) -> None:
        result = tasks.add.enqueue(2, b=3)
        kind, queue, priority, _, payload = job_row(result.id)
        self.assertEqual(kind, pgenough_backend.KIND)
        self.assertEqual((queue, priority), ("default", 0))
        self.assertJSONEqual(
            payload,
            {"task": "reports.tasks.add", "args": [2], "kwargs": {"b": 3}, "backend": "default"},
        )

    def test_get_result(self) -> None:
        result = tasks.add.enqueue(1, 2)
        self.assertEqual(default_task_backend.get_result(result.id), result)
        self.assertEqual(tasks.add.get_result(result.id), result)
        with self.assertRaises(TaskResultMismatch):
            tasks.noop.get_result(result.id)

    def test_refresh(self) -> None:
        result = tasks.add.enqueue(1, 2)
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE pgenough.django_task_results SET status = 'SUCCESSFUL',"
                " started_at = now(), finished_at = now(), return_value = '3' WHERE id = %s",
                [int(result.id)],
            )
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, 3)

    def test_get_missing_result(self) -> None:
        for missing in ["987654321", "abc", "", "-1", str(2**70)]:
            with self.subTest(missing), self.assertRaises(TaskResultDoesNotExist):
                default_task_backend.get_result(missing)

    def test_priority_is_pgenough_priority(self) -> None:
        # Both run higher priorities first (pgenough claims by priority DESC).
        for priority in [-100, -1, 0, 42, 100]:
            with self.subTest(priority):
                result = tasks.noop.using(priority=priority).enqueue()
                self.assertEqual(result.task.priority, priority)
                self.assertEqual(job_row(result.id)[2], priority)
                self.assertEqual(default_task_backend.get_result(result.id).task.priority, priority)

    def test_priority_out_of_range_is_refused(self) -> None:
        for priority in [-101, 101]:
            with self.subTest(priority), self.assertRaises(InvalidTask):
                tasks.noop.using(priority=priority).enqueue()

    def test_run_after_is_the_jobs_run_at(self) -> None:
        when = timezone.now() + timedelta(hours=1)
        result = tasks.noop.using(run_after=when).enqueue()
        self.assertEqual(job_row(result.id)[3], when)
        self.assertEqual(default_task_backend.get_result(result.id).task.run_after, when)

    def test_naive_run_after_is_refused(self) -> None:
        naive = timezone.now().replace(tzinfo=None)
        with self.assertRaisesMessage(InvalidTask, "run_after must be an aware datetime"):
            tasks.noop.using(run_after=naive).enqueue()

    def test_queue_name_is_the_jobs_queue(self) -> None:
        result = tasks.urgent.enqueue("x")
        self.assertEqual(job_row(result.id)[1:3], ("reports", 10))
        self.assertEqual(default_task_backend.get_result(result.id).task.queue_name, "reports")

    def test_unknown_queue_is_refused(self) -> None:
        with self.assertRaisesMessage(InvalidTask, "Queue 'elsewhere' is not valid for backend"):
            tasks.noop.using(queue_name="elsewhere").enqueue()

    def test_a_task_in_main_is_refused(self) -> None:
        def in_a_script() -> None:
            pass

        in_a_script.__module__ = "__main__"
        in_a_script.__qualname__ = "in_a_script"
        with self.assertRaisesMessage(InvalidTask, "a worker cannot import"):
            task(in_a_script)

    def test_arguments_that_are_not_json_are_refused(self) -> None:
        for args, kwargs in [
            ([timezone.now()], {}),
            ([], {"x": object()}),
            ([float("nan")], {}),
            ([], {"text": "a\x00b"}),
            ([{1: "int key"}], {}),
        ]:
            # TypeError: Django's own error type for them.
            with self.subTest(args=args, kwargs=kwargs), self.assertRaises(TypeError):
                tasks.noop.enqueue(*args, **kwargs)
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pgenough.jobs")
            self.assertEqual(cur.fetchone()[0], 0)  # and the transaction is still usable

    def test_bytes_and_tuples_become_json_as_in_django(self) -> None:
        result = tasks.noop.enqueue(b"bytes", (1, 2))
        self.assertEqual(result.args, ["bytes", [1, 2]])
        self.assertEqual(default_task_backend.get_result(result.id).args, ["bytes", [1, 2]])

    async def test_aenqueue_and_aget_result(self) -> None:
        for task in [tasks.noop, tasks.noop_async]:
            with self.subTest(task):
                result = await task.aenqueue(1, two=3)
                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertEqual(await default_task_backend.aget_result(result.id), result)
                self.assertEqual(await task.aget_result(result.id), result)
                await result.arefresh()
        with self.assertRaises(TaskResultDoesNotExist):
            await default_task_backend.aget_result("987654321")

    async def test_validate_on_aenqueue(self) -> None:
        with self.assertRaises(InvalidTask):
            await tasks.noop.using(queue_name="elsewhere").aenqueue()

    def test_enqueue_logs(self) -> None:
        framework = TaskResultStatus.__module__.split(".base")[0]  # django.tasks, django_tasks
        with self.assertLogs(framework, level="DEBUG") as captured:
            result = tasks.noop.enqueue()
        self.assertEqual(len(captured.output), 1)
        self.assertIn("enqueued", captured.output[0])
        self.assertIn(result.id, captured.output[0])

    def test_check_passes(self) -> None:
        self.assertEqual(list(default_task_backend.check()), [])

    def test_check_refuses_what_the_backend_cannot_do(self) -> None:
        backend = pgenough_backend.PgenoughBackend(
            "broken", {"OPTIONS": {"DATABASE": "nowhere", "RETENTION": 3}}
        )
        ids = sorted(e.id for e in backend.check())
        self.assertEqual(ids, ["pgenough.tasks.E001", "pgenough.tasks.E002"])

    def test_bad_retention_is_improperly_configured(self) -> None:
        with self.assertRaisesMessage(ImproperlyConfigured, "RESULT_RETENTION"):
            pgenough_backend.PgenoughBackend("bad", {"OPTIONS": {"RESULT_RETENTION": "1d"}})

    def test_configured_queues(self) -> None:
        self.assertEqual(pgenough_backend.configured_queues(), ["default", "reports"])
        with override_settings(
            TASKS={
                "a": {"BACKEND": pgenough_backend.BACKEND_PATH},
                "b": {"BACKEND": pgenough_backend.BACKEND_PATH, "QUEUES": ["x", "default"]},
                "c": {"BACKEND": "somewhere.else.Backend", "QUEUES": ["not-ours"]},
            }
        ):
            self.assertEqual(pgenough_backend.configured_queues(), ["default", "x"])

    def test_prune_keeps_what_is_unfinished_or_recent(self) -> None:
        old, recent, waiting = (tasks.noop.enqueue() for _ in range(3))
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE pgenough.django_task_results SET status = 'SUCCESSFUL',"
                " finished_at = now() - CASE WHEN id = %s THEN interval '8 days'"
                " ELSE interval '1 hour' END WHERE id = ANY(%s)",
                [int(old.id), [int(old.id), int(recent.id)]],
            )
        self.assertEqual(pgenough_backend.prune_results(), 1)
        with self.assertRaises(TaskResultDoesNotExist):
            old.refresh()
        recent.refresh()
        waiting.refresh()


class TransactionTests(Schema, TransactionTestCase):
    def test_a_job_iff_the_transaction_commits(self) -> None:
        with self.assertRaises(ZeroDivisionError), transaction.atomic():
            rolled_back = tasks.noop.enqueue()
            self.assertEqual(committed_jobs(), 0)
            _ = 1 / 0
        with self.assertRaises(TaskResultDoesNotExist):
            rolled_back.refresh()
        self.assertEqual(committed_jobs(), 0)

        with transaction.atomic():
            kept = tasks.noop.enqueue()
            with self.assertRaises(ZeroDivisionError), transaction.atomic():
                tasks.noop.enqueue()  # in a savepoint that rolls back
                _ = 1 / 0
            self.assertEqual(committed_jobs(), 0)
        self.assertEqual(committed_jobs(), 1)
        kept.refresh()

    def test_autocommit_commits_at_once(self) -> None:
        tasks.noop.enqueue()
        self.assertEqual(committed_jobs(), 1)


class WorkerTests(Schema, TransactionTestCase):
    """The shared app's worker, in this process, on the test database."""

    def work(self, **options: Any) -> Any:
        return asyncio.run(run_until_idle(**options))

    def test_results_as_the_worker_runs_them(self) -> None:
        add = tasks.add.enqueue(2, 3)
        report = tasks.write_report.enqueue("sync")
        report_async = tasks.write_report_async.enqueue("async")
        noop_async = tasks.noop_async.enqueue()
        context = tasks.look_at_myself.enqueue()
        later = tasks.noop.using(run_after=timezone.now() + timedelta(days=1)).enqueue()

        stats = self.work()

        self.assertEqual(stats.failed, 0)
        for result in [add, report, report_async, noop_async, context]:
            with self.subTest(result.task):
                self.assertEqual(result.status, TaskResultStatus.READY)
                result.refresh()
                self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
                self.assertEqual(result.errors, [])
                self.assertEqual(result.attempts, 1)
                self.assertEqual(len(result.worker_ids), 1)
                self.assertTrue(result.worker_ids[0].startswith("worker-"))
                self.assertGreaterEqual(result.started_at, result.enqueued_at)
                self.assertGreaterEqual(result.finished_at, result.started_at)
                self.assertEqual(result.last_attempted_at, result.started_at)
                self.assertIsNone(job_row(result.id))  # completed with its outcome
        self.assertEqual(add.return_value, 5)
        self.assertEqual(Report.objects.get(pk=report.return_value).name, "sync")
        self.assertEqual(Report.objects.get(pk=report_async.return_value).name, "async")
        self.assertIsNone(noop_async.return_value)
        self.assertEqual(
            context.return_value,
            {"id": context.id, "attempt": 1, "status_seen": TaskResultStatus.RUNNING},
        )
        later.refresh()
        self.assertEqual(later.status, TaskResultStatus.READY)  # its run_after is tomorrow

    def test_a_failure_is_recorded_and_the_worker_carries_on(self) -> None:
        cases = [
            (tasks.fail.enqueue(), ValueError, "ValueError: This task failed due to ValueError\n"),
            (tasks.exit_.enqueue(), SystemExit, "SystemExit: This task failed due to SystemExit\n"),
            (tasks.not_json.enqueue(), TypeError, "Unsupported type"),
            (tasks.not_a_number.enqueue(), ValueError, "Out of range float values"),
        ]
        lost = tasks.lose_the_connection.enqueue()
        after = tasks.add.enqueue(1, 1)

        stats = self.work(concurrency=1)

        # Each FAILED task is a failed attempt and a dead job for the worker's count.
        self.assertEqual((stats.completed, stats.failed, stats.dead), (1, 5, 5))

        lost.refresh()
        self.assertEqual(lost.status, TaskResultStatus.FAILED)
        self.assertEqual(lost.errors[0].exception_class_path, "django.db.utils.OperationalError")
        self.assertEqual(lost.attempts, 1)

        for result, exception, message in cases:
            with self.subTest(result.task):
                result.refresh()
                self.assertEqual(result.status, TaskResultStatus.FAILED)
                self.assertIs(result.is_finished, True)
                with self.assertRaisesMessage(ValueError, "Task failed"):
                    result.return_value  # noqa: B018
                self.assertEqual(len(result.errors), 1)
                self.assertEqual(result.errors[0].exception_class, exception)
                self.assertIn(message, result.errors[0].traceback)
                self.assertEqual(result.attempts, 1)  # Django's semantics: no retry
                self.assertIsNotNone(result.finished_at)
                # The job is dead with the same failure, as any pgenough job's.
                job = get_job(django_connection(), int(result.id))
                self.assertEqual((job.state, job.attempts), ("dead", 1))
                [attempt] = job.errors
                self.assertTrue(attempt.error.startswith(exception.__name__), attempt.error)
                self.assertIn(message, attempt.traceback)
        after.refresh()
        self.assertEqual(after.return_value, 2)

    def test_a_failing_tasks_traceback_is_the_jobs_too(self) -> None:
        """Django's result keeps its traceback; so does the job, in ``jobs.errors``: the
        file and line of the task's raise, for ``pgenough job ID``, the admin, the
        dashboard."""
        result = tasks.fail.enqueue()
        self.work()
        result.refresh()
        source, first = inspect.getsourcelines(tasks.fail.func)
        line = first + next(i for i, text in enumerate(source) if "raise ValueError" in text)
        where = f'File "{inspect.getsourcefile(tasks.fail.func)}", line {line}, in fail'
        self.assertIn(where, result.errors[0].traceback)  # Django's own, as before
        job = get_job(django_connection(), int(result.id))
        self.assertEqual(job.state, "dead")
        self.assertEqual(job.last_error, "ValueError: This task failed due to ValueError")
        [attempt] = job.errors
        self.assertIn(where, attempt.traceback)
        self.assertTrue(
            attempt.traceback.endswith("ValueError: This task failed due to ValueError\n")
        )

    def test_a_task_that_cannot_be_loaded_fails(self) -> None:
        result = tasks.noop.enqueue()
        with connection.cursor() as cur:  # as after a deploy that removed the task
            cur.execute(
                "UPDATE pgenough.jobs SET payload = jsonb_set(payload, '{task}', %s::jsonb)",
                ['"reports.tasks.gone"'],
            )
        stats = self.work()
        self.assertEqual((stats.failed, stats.dead), (1, 1))
        with connection.cursor() as cur:
            cur.execute(
                "SELECT status, errors -> 0 ->> 'exception_class_path'"
                " FROM pgenough.django_task_results WHERE id = %s",
                [int(result.id)],
            )
            self.assertEqual(cur.fetchone(), ("FAILED", "builtins.ImportError"))
        job = get_job(django_connection(), int(result.id))
        self.assertEqual(job.state, "dead")
        self.assertIn('does not define a "gone" attribute', job.errors[0].traceback)

    def test_the_outcome_commits_with_the_jobs_completion_or_not_at_all(self) -> None:
        result = tasks.discarded_while_running.enqueue()
        stats = self.work()
        self.assertEqual(stats.lost, 1)  # completing it raised LeaseLost: rolled back
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.RUNNING)  # no SUCCESSFUL recorded

    def test_a_job_of_a_tasks_alias_that_is_gone_is_dead_lettered(self) -> None:
        result = tasks.noop.enqueue()
        with connection.cursor() as cur:
            cur.execute('UPDATE pgenough.jobs SET payload = payload || \'{"backend": "gone"}\'')
        self.work()
        with connection.cursor() as cur:
            cur.execute("SELECT state::text, last_error FROM pgenough.jobs")
            state, error = cur.fetchone()
        self.assertEqual(state, "dead")
        self.assertIn("TASKS['gone']", error)
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.READY)

    def test_retry_in_asks_for_another_attempt(self) -> None:
        result = tasks.retry_once.enqueue()
        self.work()
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, 2)
        self.assertEqual(result.attempts, 2)
        self.assertEqual(result.errors[0].exception_class_path, "pgenough.core.errors.RetryIn")

    def test_retries_end_in_failed_when_the_attempts_are_spent(self) -> None:
        result = tasks.always_retry.enqueue()
        self.work()
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertEqual(result.attempts, pgenough_backend.run_django_task.options.max_attempts)
        job = get_job(django_connection(), int(result.id))  # dead with its FAILED result
        self.assertEqual((job.state, job.last_error), ("dead", "RetryIn: never done (retry in 0s)"))

    def test_the_pruning_job(self) -> None:
        old, recent = tasks.add.enqueue(1, 2), tasks.add.enqueue(3, 4)
        self.work()
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE pgenough.django_task_results SET finished_at = now() - interval '8 days'"
                " WHERE id = %s",
                [int(old.id)],
            )
        pgenough_backend.prune_results.enqueue(django_connection())  # as its schedule does
        self.work()
        with self.assertRaises(TaskResultDoesNotExist):
            old.refresh()
        recent.refresh()
        self.assertEqual(recent.return_value, 7)

    def test_higher_priority_runs_first(self) -> None:
        for name, priority in [("low", -5), ("high", 50), ("middle", 0)]:
            tasks.write_report.using(priority=priority).enqueue(name)
        self.work(concurrency=1, batch_size=1)
        names = list(Report.objects.order_by("id").values_list("name", flat=True))
        self.assertEqual(names, ["high", "middle", "low"])

    def test_queue_name_routes_to_the_queue(self) -> None:
        result = tasks.urgent.enqueue("on reports")
        self.work()
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)


class RunJobsTests(Schema, TestCase):
    """Test mode: ``run_jobs`` runs the Django tasks' jobs in the test's transaction, as a
    worker would, and a task that FAILED fails the call as a failing pgenough task does."""

    def test_a_failed_task_raises_its_own_error(self) -> None:
        failing = tasks.fail.enqueue()
        try:
            run_jobs(django_connection(), app)
        except ValueError as exc:  # not assertRaises, which drops the traceback
            shown = "".join(traceback.format_exception(exc))
        else:
            self.fail("run_jobs did not raise the task's error")
        self.assertIn('raise ValueError("This task failed due to ValueError")', shown)
        failing.refresh()  # recorded as on a worker: FAILED, the job dead, no retry
        self.assertEqual(failing.status, TaskResultStatus.FAILED)
        self.assertEqual(failing.errors[0].exception_class, ValueError)
        self.assertEqual(job_state(failing.id), "dead")

    def test_a_database_error_of_the_task_leaves_the_test_usable(self) -> None:
        Report.objects.create(name="the test's")
        failing = tasks.too_long_a_name.enqueue()
        with self.assertRaisesMessage(DataError, "value too long"):
            run_jobs(django_connection(), app)
        failing.refresh()  # recorded after its savepoint rolled back
        self.assertEqual(failing.status, TaskResultStatus.FAILED)
        self.assertEqual(failing.errors[0].exception_class, DataError)
        self.assertEqual([r.name for r in Report.objects.all()], ["the test's"])

    def test_without_raise_on_failure_the_report_says_failed(self) -> None:
        tasks.fail.enqueue()
        written = tasks.write_report_async.enqueue("async")
        report = run_jobs(django_connection(), app, raise_on_failure=False)
        self.assertEqual([r.state for r in report.runs], ["dead", "completed"])
        self.assertEqual(report.completed_kinds, [pgenough_backend.KIND])
        [failed] = report.failed
        self.assertEqual(failed.error, "ValueError: This task failed due to ValueError")
        self.assertIsInstance(failed.exception, ValueError)
        written.refresh()
        self.assertEqual(written.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(Report.objects.get(pk=written.return_value).name, "async")


class EagerTests(Schema, TestCase):
    """The shared app eager, as ``PGENOUGH_EAGER=1`` makes it: ``enqueue`` runs the task
    once its result row is written, and returns the finished result; a task that fails
    raises its own error there, its result FAILED (as an eager pgenough task raises)."""

    def setUp(self) -> None:
        super().setUp()
        self.addCleanup(setattr, app, "eager", app.eager)
        app.eager = True

    def test_enqueue_runs_the_task_and_returns_its_result(self) -> None:
        when = timezone.now() + timedelta(days=1)  # not held back, as an eager job is not
        for task, args, value in [
            (tasks.add, (2, 3), 5),
            (tasks.noop_async, (), None),
            (tasks.add.using(run_after=when, queue_name="reports"), (1, 1), 2),
        ]:
            with self.subTest(task):
                result = task.enqueue(*args)
                self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
                self.assertEqual(result.return_value, value)
                self.assertEqual(result.task, task)
                self.assertEqual(result.attempts, 1)
                self.assertIsNotNone(result.finished_at)
                self.assertEqual(default_task_backend.get_result(result.id), result)
                self.assertIsNone(job_row(result.id))  # completed
        written = tasks.write_report.enqueue("eager")
        self.assertEqual(Report.objects.get(pk=written.return_value).name, "eager")
        context = tasks.look_at_myself.enqueue()
        self.assertEqual(context.return_value["status_seen"], TaskResultStatus.RUNNING)

    async def test_aenqueue(self) -> None:
        result = await tasks.add.aenqueue(4, 5)
        self.assertEqual((result.status, result.return_value), (TaskResultStatus.SUCCESSFUL, 9))

    def test_a_failing_task_raises_its_own_error_and_its_result_is_failed(self) -> None:
        with self.assertRaisesMessage(ValueError, "This task failed due to ValueError"):
            tasks.fail.enqueue()
        self.assertEqual(results_table(), [("reports.tasks.fail", "FAILED", "builtins.ValueError")])
        with connection.cursor() as cur:
            cur.execute("SELECT state::text FROM pgenough.jobs")
            self.assertEqual(cur.fetchall(), [("dead",)])  # dead with its FAILED result

    def test_a_database_error_of_the_task_is_raised_at_enqueue(self) -> None:
        with self.assertRaisesMessage(DataError, "value too long"):
            tasks.too_long_a_name.enqueue()
        self.assertEqual(
            results_table(),
            [("reports.tasks.too_long_a_name", "FAILED", "django.db.utils.DataError")],
        )

    def test_in_a_transaction_that_rolls_back(self) -> None:
        with self.assertRaises(ZeroDivisionError), transaction.atomic():
            result = tasks.write_report.enqueue("rolled back")
            self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
            _ = 1 / 0
        self.assertEqual(results_table(), [])
        self.assertFalse(Report.objects.exists())


class EagerAutocommitTests(Schema, TransactionTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.addCleanup(setattr, app, "eager", app.eager)
        app.eager = True

    def test_outside_atomic_the_run_commits(self) -> None:
        result = tasks.write_report.enqueue("committed")
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(committed_jobs(), 0)
        with psycopg.connect(conninfo()) as other:
            row = other.execute("SELECT name FROM reports_report").fetchone()
        self.assertEqual(row, ("committed",))
        with self.assertRaises(ValueError):
            tasks.fail.enqueue()
        self.assertEqual([status for _, status, _ in results_table()], ["SUCCESSFUL", "FAILED"])
