-- name: failures_since
-- What went wrong in the window (beside the failed runs: runs.sql's count_failed_since):
-- rows that could not be written, jobs dead-lettered, and failed job attempts (dead or
-- retried); and the database's now.
SELECT
    now() AS at,
    (SELECT count(*) FROM pgenough.plan_failures
     WHERE at > now() - %(window)s * interval '1 second') AS rows_failed,
    (SELECT count(*) FROM pgenough.jobs
     WHERE state = 'dead' AND finished_at > now() - %(window)s * interval '1 second')
        AS jobs_dead,
    (SELECT count(*) FROM pgenough.jobs j, jsonb_array_elements(j.errors) e
     WHERE j.last_error IS NOT NULL
       AND (e ->> 'at')::timestamptz > now() - %(window)s * interval '1 second')
        AS job_attempts_failed

-- name: run_row_failures
-- Rows of a run that could not be written, in staging order.
SELECT seq, base_plan_id, plan_id, error, at
FROM pgenough.plan_failures
WHERE run_id = %(id)s
ORDER BY seq
LIMIT %(limit)s

-- name: run_jobs
-- The run's chunk jobs still in the queue (completed ones are deleted): waiting, running,
-- failing, dead or cancelled.
SELECT id, queue, kind, payload, priority, state::text, attempts, max_attempts, run_at,
       created_at, claimed_at, lease_until, worker, finished_at, dedupe_key, last_error, errors
FROM pgenough.jobs
WHERE queue = %(queue)s AND kind = %(kind)s AND payload ->> 'run_id' = %(id)s::text
ORDER BY id
