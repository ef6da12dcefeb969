-- name: failures_since
-- What went wrong in the window (beside the failed runs, runs.sql's count_failed_since,
-- and the jobs' side, the core's job_failures): rows that could not be written; and the
-- database's now.
SELECT
    now() AS at,
    (SELECT count(*) FROM plans.plan_failures
     WHERE at > now() - %(window)s * interval '1 second') AS rows_failed

-- name: run_row_failures
-- Rows of a run that could not be written, in staging order.
SELECT seq, base_plan_id, plan_id, error, at
FROM plans.plan_failures
WHERE run_id = %(id)s
ORDER BY seq
LIMIT %(limit)s

