-- name: insert_result
-- A Django task's result as enqueued, beside its job (same transaction, same id).
INSERT INTO pgenough.django_task_results
    (id, backend, task_path, queue, priority, run_after, args, kwargs)
VALUES (%(id)s, %(backend)s, %(task_path)s, %(queue)s, %(priority)s, %(run_after)s,
        %(args)s, %(kwargs)s)
RETURNING id, backend, task_path, queue, priority, run_after, args, kwargs, status,
          enqueued_at, started_at, last_attempted_at, finished_at, return_value, errors,
          worker_ids

-- name: get_result
-- One result, everything known about it.
SELECT id, backend, task_path, queue, priority, run_after, args, kwargs, status,
       enqueued_at, started_at, last_attempted_at, finished_at, return_value, errors,
       worker_ids
FROM pgenough.django_task_results
WHERE id = %(id)s

-- name: start_attempt
-- An attempt begins (committed at once, so get_result sees RUNNING): the worker that
-- claimed the job joins worker_ids, whose length is Django's attempts.
UPDATE pgenough.django_task_results r
SET status = 'RUNNING',
    started_at = coalesce(r.started_at, now()),
    last_attempted_at = now(),
    worker_ids = r.worker_ids || coalesce(
        (SELECT j.worker FROM pgenough.jobs j WHERE j.id = r.id), %(worker)s)
WHERE r.id = %(id)s AND r.status IN ('READY', 'RUNNING')
RETURNING id, backend, task_path, queue, priority, run_after, args, kwargs, status,
          enqueued_at, started_at, last_attempted_at, finished_at, return_value, errors,
          worker_ids

-- name: finish_result
-- The attempt's outcome, in the transaction that also completes the job.
UPDATE pgenough.django_task_results
SET status = %(status)s,
    finished_at = now(),
    return_value = %(return_value)s,
    errors = errors || %(errors)s
WHERE id = %(id)s AND status = 'RUNNING'
RETURNING id

-- name: requeue_result
-- The task asked for another attempt (pgenough's RetryIn): READY again, the error kept.
UPDATE pgenough.django_task_results
SET status = 'READY',
    errors = errors || %(errors)s
WHERE id = %(id)s AND status = 'RUNNING'

-- name: prune_results
-- Delete a backend's finished results past their retention, a batch at a time.
DELETE FROM pgenough.django_task_results
WHERE id IN (
    SELECT id FROM pgenough.django_task_results
    WHERE finished_at < now() - %(retention)s * interval '1 second'
      AND backend = %(backend)s
    ORDER BY finished_at
    LIMIT %(limit)s
)
