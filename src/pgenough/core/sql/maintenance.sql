-- name: rescue_expired
-- Take back claims whose lease expired (the worker died or hung). The attempt was counted at
-- claim time; a job with no attempts left is dead-lettered instead of retried. Rows locked by
-- a handler's completing transaction are skipped: that claim is about to finish.
WITH expired AS (
    SELECT id FROM pgenough.jobs
    WHERE state = 'running' AND lease_until < now()
    ORDER BY lease_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE pgenough.jobs j
SET state = CASE WHEN j.attempts >= j.max_attempts
                 THEN 'dead' ELSE 'ready' END::pgenough.job_state,
    finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
    run_at = now(),
    lease_until = NULL,
    worker = NULL,
    last_error = 'lease expired: worker ' || coalesce(j.worker, '?') || ' stopped heartbeating',
    errors = jsonb_path_query_array(
        j.errors || jsonb_build_array(jsonb_build_object(
            'attempt', j.attempts, 'at', now(), 'worker', j.worker,
            'error', 'lease expired: worker stopped heartbeating')),
        '$[last - 19 to last]')
FROM expired
WHERE j.id = expired.id
RETURNING j.id, j.queue, j.state::text

-- name: delete_finished
-- Remove dead and cancelled jobs past their retention, a batch at a time.
DELETE FROM pgenough.jobs
WHERE id IN (
    SELECT id FROM pgenough.jobs
    WHERE state IN ('dead', 'cancelled')
      AND finished_at < now() - %(retention)s * interval '1 second'
    LIMIT %(limit)s
)

-- name: delete_old_messages
-- Remove stored pub/sub payloads past their retention, a batch at a time.
DELETE FROM pgenough.messages
WHERE id IN (
    SELECT id FROM pgenough.messages
    WHERE created_at < now() - %(retention)s * interval '1 second'
    LIMIT %(limit)s
)

-- name: statement_timeout
-- Bound one maintenance statement.
SELECT set_config('statement_timeout', %(ms)s, true)

-- name: jobs_dead_rows
-- The jobs table's dead rows, as the statistics collector last counted them.
SELECT coalesce(n_dead_tup, 0)
FROM pg_stat_user_tables
WHERE relid = 'pgenough.jobs'::regclass

-- name: vacuum_jobs
-- Reclaim the jobs table's dead rows now; a vacuum already running on it is not waited for.
VACUUM (SKIP_LOCKED) pgenough.jobs
