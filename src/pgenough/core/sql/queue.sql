-- name: enqueue
-- Insert one job; a duplicate dedupe key among live jobs inserts nothing. Wakes idle
-- workers of the queue on commit when the job is runnable now.
WITH ins AS (
    INSERT INTO pgenough.jobs (queue, kind, payload, priority, run_at, max_attempts, dedupe_key)
    VALUES (%(queue)s, %(kind)s, %(payload)s, %(priority)s,
            coalesce(%(run_at)s::timestamptz, now() + %(delay)s::interval, now()),
            %(max_attempts)s, %(dedupe_key)s)
    ON CONFLICT (queue, dedupe_key)
        WHERE dedupe_key IS NOT NULL AND state IN ('ready', 'running')
        DO NOTHING
    RETURNING id, queue, run_at
)
SELECT id, CASE WHEN run_at <= now() THEN pg_notify(%(channel)s, queue) END
FROM ins

-- name: db_now
-- The database clock, which every run_at is compared against.
SELECT now()

-- name: notify_queue
-- Wake idle workers of a queue (on commit).
SELECT pg_notify(%(channel)s, %(queue)s)

-- name: copy_jobs
-- Bulk enqueue without dedupe keys.
COPY pgenough.jobs (queue, kind, payload, priority, run_at, max_attempts, dedupe_key) FROM STDIN

-- name: create_enqueue_staging
-- Per-session staging for bulk enqueue with dedupe keys; emptied at each commit.
CREATE TEMP TABLE IF NOT EXISTS pgenough_enqueue_staging (
    ord bigint, queue text, kind text, payload jsonb, priority integer,
    run_at timestamptz, max_attempts integer, dedupe_key text
) ON COMMIT DELETE ROWS

-- name: copy_enqueue_staging
-- Bulk enqueue with dedupe keys, step 1.
COPY pgenough_enqueue_staging (ord, queue, kind, payload, priority, run_at, max_attempts, dedupe_key) FROM STDIN

-- name: insert_from_staging
-- Bulk enqueue with dedupe keys, step 2: the first of each key wins, live duplicates are skipped.
INSERT INTO pgenough.jobs (queue, kind, payload, priority, run_at, max_attempts, dedupe_key)
SELECT queue, kind, payload, priority, run_at, max_attempts, dedupe_key
FROM (
    SELECT DISTINCT ON (queue, coalesce(dedupe_key, ord::text)) *
    FROM pgenough_enqueue_staging
    ORDER BY queue, coalesce(dedupe_key, ord::text), ord
) first_of_key
ORDER BY ord
ON CONFLICT (queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND state IN ('ready', 'running')
    DO NOTHING
RETURNING queue

-- name: truncate_enqueue_staging
-- Leave the staging table empty for the next call in the same transaction.
TRUNCATE pgenough_enqueue_staging

-- name: plan_each_claim
-- The claim loop's connection, while the loop holds it (see worker._executor.Executor._hold):
-- its prepared claims are planned at every execution, with their values and the table's
-- current size, and never with a Sort, so the claim index's order is the only way to the
-- first jobs.
SELECT set_config('plan_cache_mode', 'force_custom_plan', false),
       set_config('enable_sort', 'off', false)

-- name: plan_as_usual
-- The claim loop's connection, going back to the pool: both settings as RESET leaves them.
SELECT set_config(name, reset_val, false) FROM pg_settings
WHERE name IN ('plan_cache_mode', 'enable_sort')

-- name: claim_without_sort
-- The claim's planner setting for its own transaction, where the session is not ours to set.
SET LOCAL enable_sort = off

-- name: claim
-- Acknowledge finished jobs and claim up to %(limit)s ready ones in one round trip and one
-- commit. A job is acknowledged only if it is still the same claim (state and attempts) of
-- the same job (its enqueue time: after a failover with asynchronous replication the new
-- primary hands out again the ids of the jobs it never received).
WITH done AS (
    DELETE FROM pgenough.jobs j
    USING unnest(%(done_ids)s::bigint[], %(done_attempts)s::integer[],
                 %(done_created)s::timestamptz[]) AS d(id, attempts, created_at)
    WHERE j.id = d.id AND j.attempts = d.attempts AND j.created_at = d.created_at
      AND j.state = 'running'
), picked AS (
    SELECT id FROM pgenough.jobs
    WHERE queue = %(queue)s AND state = 'ready' AND run_at <= now()
      -- A paused queue (pauses.py), a limited one (limits.py: its own claim): a one-time
      -- probe of each primary key per claim.
      AND NOT EXISTS (SELECT FROM pgenough.queue_pauses p WHERE p.queue = %(queue)s)
      AND NOT EXISTS (SELECT FROM pgenough.queue_limits l WHERE l.queue = %(queue)s)
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE pgenough.jobs j
    SET state = 'running',
        attempts = j.attempts + 1,
        claimed_at = now(),
        lease_until = now() + %(lease)s * interval '1 second',
        worker = %(worker)s
    FROM picked
    WHERE j.id = picked.id
    RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.attempts, j.max_attempts,
              j.run_at, j.created_at
)
SELECT * FROM claimed
UNION ALL
-- The queue has a limit: a last row with id -1 says to claim it with claim_limited.
SELECT -1, %(queue)s, '', NULL, 0, 0, 0, now(), now()
WHERE EXISTS (SELECT FROM pgenough.queue_limits l WHERE l.queue = %(queue)s)

-- name: claim_after
-- The claim, started past this executor's last claimed position (priority, run_at, id)
-- within that priority: the index scan begins after the entries of the jobs claimed
-- before, which stay in the claim index as dead entries for as long as an open snapshot
-- (a held xmin horizon) keeps vacuum and index hinting from removing them. A job behind
-- the position is found by the full ``claim`` the worker runs regularly and when this one
-- comes back short (see worker/_executor.py).
WITH done AS (
    DELETE FROM pgenough.jobs j
    USING unnest(%(done_ids)s::bigint[], %(done_attempts)s::integer[],
                 %(done_created)s::timestamptz[]) AS d(id, attempts, created_at)
    WHERE j.id = d.id AND j.attempts = d.attempts AND j.created_at = d.created_at
      AND j.state = 'running'
), picked AS (
    SELECT id FROM pgenough.jobs
    WHERE queue = %(queue)s AND state = 'ready' AND run_at <= now()
      -- A paused queue (pauses.py), a limited one (limits.py: its own claim): a one-time
      -- probe of each primary key per claim.
      AND NOT EXISTS (SELECT FROM pgenough.queue_pauses p WHERE p.queue = %(queue)s)
      AND NOT EXISTS (SELECT FROM pgenough.queue_limits l WHERE l.queue = %(queue)s)
      AND priority = %(priority)s
      AND (run_at, id) > (%(after_run_at)s::timestamptz, %(after_id)s::bigint)
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE pgenough.jobs j
    SET state = 'running',
        attempts = j.attempts + 1,
        claimed_at = now(),
        lease_until = now() + %(lease)s * interval '1 second',
        worker = %(worker)s
    FROM picked
    WHERE j.id = picked.id
    RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.attempts, j.max_attempts,
              j.run_at, j.created_at
)
SELECT * FROM claimed
UNION ALL
-- The queue has a limit: a last row with id -1 says to claim it with claim_limited.
SELECT -1, %(queue)s, '', NULL, 0, 0, 0, now(), now()
WHERE EXISTS (SELECT FROM pgenough.queue_limits l WHERE l.queue = %(queue)s)

-- name: claim_limited
-- Acknowledge finished jobs and claim up to %(limit)s ready jobs of a limited queue, no more
-- than its limits leave, under the queue's advisory lock: pgenough.claim_limited (migration
-- 0006). A last row with id -2 says the queue has no limit any more; with id -3, that its
-- rate held jobs back (and until when).
SELECT * FROM pgenough.claim_limited(
    %(queue)s, %(worker)s, %(lease)s, %(limit)s, %(key)s,
    %(done_ids)s::bigint[], %(done_attempts)s::integer[], %(done_created)s::timestamptz[])

-- name: complete
-- Complete one job inside the caller's transaction; no row means the lease was lost. A claim
-- is the job's id, its attempt and its enqueue time (see claim).
DELETE FROM pgenough.jobs
WHERE id = %(id)s AND attempts = %(attempts)s AND created_at = %(created_at)s
  AND state = 'running'
RETURNING id

-- name: complete_many
-- Complete a batch handler's jobs inside its transaction. Returns the ids still this claim
-- (state, attempts and enqueue time); a missing one was reclaimed or cancelled meanwhile.
DELETE FROM pgenough.jobs j
USING unnest(%(ids)s::bigint[], %(attempts)s::integer[], %(created)s::timestamptz[])
      AS d(id, attempts, created_at)
WHERE j.id = d.id AND j.attempts = d.attempts AND j.created_at = d.created_at
  AND j.state = 'running'
RETURNING j.id

-- name: fail
-- Record a failed attempt: back to ready after %(delay)s seconds, or dead when the attempts
-- are spent or the handler gave up. Appends the attempt's error (and its traceback, when it
-- has one) to errors, keeps the last %(errors_kept)s entries, and strips the traceback of the
-- entries past the newest %(tracebacks_kept)s that have one (bounds: core/failures.py).
UPDATE pgenough.jobs
SET state = CASE WHEN %(give_up)s::boolean OR attempts >= max_attempts
                 THEN 'dead' ELSE 'ready' END::pgenough.job_state,
    run_at = CASE WHEN %(give_up)s::boolean OR attempts >= max_attempts
                  THEN run_at ELSE now() + %(delay)s::float8 * interval '1 second' END,
    finished_at = CASE WHEN %(give_up)s::boolean OR attempts >= max_attempts THEN now() END,
    lease_until = NULL,
    worker = NULL,
    last_error = %(error)s::text,
    errors = (
        SELECT coalesce(jsonb_agg(CASE WHEN newer < %(tracebacks_kept)s::integer THEN e
                                       ELSE e - 'traceback' END ORDER BY n), '[]'::jsonb)
        FROM (
            SELECT e, n,
                   count(*) FILTER (WHERE e ? 'traceback')
                       OVER (ORDER BY n DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                       AS newer
            FROM jsonb_array_elements(jsonb_path_query_array(
                     errors || jsonb_build_array(
                         jsonb_build_object('attempt', attempts, 'at', now(), 'worker', worker,
                                            'error', %(error)s::text)
                         || jsonb_strip_nulls(
                                jsonb_build_object('traceback', %(traceback)s::text))),
                     '$[last - $n to last]',
                     jsonb_build_object('n', %(errors_kept)s::integer - 1)))
                 WITH ORDINALITY AS entries(e, n)
        ) kept
    )
WHERE id = %(id)s AND attempts = %(attempts)s AND created_at = %(created_at)s
  AND state = 'running'
RETURNING state::text, run_at

-- name: defer_unhandled
-- Hand back a job whose kind no task of the claiming worker handles (an older worker during
-- a rolling deploy, or a typo): ready again after %(delay)s seconds with its attempt not
-- counted, the reason recorded as an error; or dead, the attempt counted, once it has waited
-- %(grace)s seconds since it was enqueued. Keeps the last %(errors_kept)s errors.
UPDATE pgenough.jobs
SET state = CASE WHEN now() - created_at >= %(grace)s::float8 * interval '1 second'
                 THEN 'dead' ELSE 'ready' END::pgenough.job_state,
    attempts = CASE WHEN now() - created_at >= %(grace)s::float8 * interval '1 second'
                    THEN attempts ELSE attempts - 1 END,
    run_at = CASE WHEN now() - created_at >= %(grace)s::float8 * interval '1 second'
                  THEN run_at ELSE now() + %(delay)s::float8 * interval '1 second' END,
    finished_at = CASE WHEN now() - created_at >= %(grace)s::float8 * interval '1 second'
                       THEN now() END,
    lease_until = NULL,
    worker = NULL,
    last_error = %(error)s::text,
    errors = jsonb_path_query_array(
        errors || jsonb_build_array(jsonb_build_object(
            'attempt', attempts, 'at', now(), 'worker', worker, 'error', %(error)s::text)),
        '$[last - $n to last]', jsonb_build_object('n', %(errors_kept)s::integer - 1))
WHERE id = %(id)s AND attempts = %(attempts)s AND created_at = %(created_at)s
  AND state = 'running'
RETURNING state::text

-- name: claim_in_process
-- Test mode (testing.run_jobs): claim the next ready job of these kinds (and queues, and
-- ids, when given) not yet run by this call, in the caller's transaction. Ready means due
-- by the statement's clock, not the transaction's start (a test's transaction is long).
UPDATE pgenough.jobs j
SET state = 'running',
    attempts = j.attempts + 1,
    claimed_at = now(),
    lease_until = statement_timestamp() + %(lease)s * interval '1 second',
    worker = %(worker)s
FROM (
    SELECT id FROM pgenough.jobs
    WHERE state = 'ready'
      AND kind = ANY(%(kinds)s::text[])
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
      AND (%(scheduled)s::boolean OR run_at <= statement_timestamp())
      AND id <> ALL(%(seen)s::bigint[])
    ORDER BY priority DESC, run_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
) picked
WHERE j.id = picked.id
RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.attempts, j.max_attempts,
          j.run_at, j.created_at

-- name: heartbeat
-- Extend the leases of this worker's in-flight jobs. Rows locked by a handler's own
-- completing transaction are skipped rather than waited for.
UPDATE pgenough.jobs j
SET lease_until = now() + %(lease)s * interval '1 second'
FROM (
    SELECT id FROM pgenough.jobs
    WHERE id = ANY(%(ids)s::bigint[]) AND state = 'running' AND worker = %(worker)s
    FOR UPDATE SKIP LOCKED
) mine
WHERE j.id = mine.id
RETURNING j.id

-- name: release
-- Give claims back on shutdown: runnable again at once. The interrupted attempt stays
-- counted (a handler that never finishes must not loop forever across restarts).
UPDATE pgenough.jobs
SET state = 'ready',
    run_at = now(),
    lease_until = NULL,
    worker = NULL,
    last_error = %(error)s
WHERE id = ANY(%(ids)s::bigint[]) AND worker = %(worker)s AND state = 'running'

-- name: retry_job
-- Operator: make a dead or cancelled job (or a waiting retry) runnable now. A job whose
-- attempts are spent gets one more.
UPDATE pgenough.jobs
SET state = 'ready',
    run_at = now(),
    finished_at = NULL,
    max_attempts = greatest(max_attempts, attempts + 1)
WHERE id = %(id)s AND state IN ('dead', 'cancelled', 'ready')
RETURNING id

-- name: retry_jobs
-- Operator: make these jobs runnable now, those that are dead, cancelled or waiting (as
-- retry_job, in one statement); the others are left as they are.
UPDATE pgenough.jobs
SET state = 'ready',
    run_at = now(),
    finished_at = NULL,
    max_attempts = greatest(max_attempts, attempts + 1)
WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('dead', 'cancelled', 'ready')
RETURNING id

-- name: retry_dead
-- Operator: make every dead job of a queue (or of all queues) runnable now; of one kind and
-- whose payload's text holds a piece of text (case-insensitive), when given (as list_jobs).
UPDATE pgenough.jobs
SET state = 'ready',
    run_at = now(),
    finished_at = NULL,
    max_attempts = greatest(max_attempts, attempts + 1)
WHERE state = 'dead' AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(text)s::text IS NULL OR strpos(lower(payload::text), lower(%(text)s::text)) > 0)
RETURNING id

-- name: discard_jobs
-- Operator: cancel these jobs, those not finished, in one statement (discard_job: one). A
-- running job's handler can no longer complete it (its completion finds no claim), so
-- transactional effects roll back; and its worker is told, on commit, to stop the handler
-- (cancellation.py).
WITH target AS (
    SELECT id, state FROM pgenough.jobs
    WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('ready', 'running', 'dead')
    FOR UPDATE
), cancelled AS (
    UPDATE pgenough.jobs j
    SET state = 'cancelled', finished_at = now(), lease_until = NULL, worker = NULL
    FROM target t
    WHERE j.id = t.id
    RETURNING j.id, t.state AS was
), told AS (
    SELECT pg_notify(%(channel)s, id::text) FROM cancelled WHERE was = 'running'
)
SELECT id FROM cancelled, (SELECT count(*) FROM told) AS n

-- name: discard_dead
-- Operator: cancel every dead job of a queue (or of all queues), of a kind and whose
-- payload's text holds a piece of text when given (as retry_dead): they stay visible as
-- cancelled until the cleaner removes them.
UPDATE pgenough.jobs
SET state = 'cancelled', finished_at = now()
WHERE state = 'dead' AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(text)s::text IS NULL OR strpos(lower(payload::text), lower(%(text)s::text)) > 0)
RETURNING id

-- name: get_job
-- One job with everything known about it.
SELECT id, queue, kind, payload, priority, state::text, attempts, max_attempts, run_at,
       created_at, claimed_at, lease_until, worker, finished_at, dedupe_key, last_error, errors
FROM pgenough.jobs
WHERE id = %(id)s

-- name: stats
-- Per queue: jobs by state, the age of the oldest job that is ready to run, whether it is
-- paused (a paused queue with no jobs has its row too, so that it can be seen and resumed),
-- and its fleet-wide limits.
WITH counts AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'ready' AND run_at <= now()) AS ready,
           count(*) FILTER (WHERE state = 'ready' AND run_at > now()) AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           count(*) FILTER (WHERE state = 'dead') AS dead,
           count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
           coalesce(extract(epoch FROM now() - min(run_at)
                    FILTER (WHERE state = 'ready' AND run_at <= now())), 0)::float8
               AS oldest_ready_age
    FROM pgenough.jobs
    GROUP BY queue
)
SELECT coalesce(c.queue, p.queue) AS queue,
       coalesce(c.ready, 0) AS ready,
       coalesce(c.scheduled, 0) AS scheduled,
       coalesce(c.running, 0) AS running,
       coalesce(c.dead, 0) AS dead,
       coalesce(c.cancelled, 0) AS cancelled,
       coalesce(c.oldest_ready_age, 0) AS oldest_ready_age,
       p.queue IS NOT NULL AS paused,
       l.max_running,
       l.rate_count,
       l.rate_interval
FROM counts c
FULL JOIN pgenough.queue_pauses p ON p.queue = c.queue
LEFT JOIN pgenough.queue_limits l ON l.queue = coalesce(c.queue, p.queue)
ORDER BY 1

-- name: list_jobs
-- Operator: jobs of a state (or all), optionally only those whose last attempt failed
-- (dead, or waiting to retry), of a queue, of a kind, whose payload's JSON text holds a piece
-- of text (case-insensitive: a scan of the jobs the other filters leave, which the session's
-- statement_timeout bounds), newest first; keyset-paged by id.
SELECT id, queue, kind, payload, priority, state::text, attempts, max_attempts, run_at,
       created_at, claimed_at, lease_until, worker, finished_at, dedupe_key, last_error, errors
FROM pgenough.jobs
WHERE (%(state)s::text IS NULL OR state = %(state)s::pgenough.job_state)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(text)s::text IS NULL OR strpos(lower(payload::text), lower(%(text)s::text)) > 0)
  AND (NOT %(failing)s::boolean OR (last_error IS NOT NULL AND state IN ('ready', 'dead')))
  AND (%(before)s::bigint IS NULL OR id < %(before)s)
ORDER BY id DESC
LIMIT %(limit)s

-- name: requeue_stuck
-- Take back claims whose lease expired (the worker died or hung). The attempt was counted at
-- claim time; a job with no attempts left is dead-lettered instead of retried. Rows locked by
-- a handler's completing transaction are skipped: that claim is about to finish. Keeps the
-- last %(errors_kept)s errors; no traceback (no Python exception: the worker is gone).
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
        '$[last - $n to last]', jsonb_build_object('n', %(errors_kept)s::integer - 1))
FROM expired
WHERE j.id = expired.id
RETURNING j.id, j.queue, j.state::text AS state

-- name: delete_finished
-- Remove dead and cancelled jobs past their retention, a batch at a time.
DELETE FROM pgenough.jobs
WHERE id IN (
    SELECT id FROM pgenough.jobs
    WHERE state IN ('dead', 'cancelled')
      AND finished_at < now() - %(retention)s * interval '1 second'
    LIMIT %(limit)s
)

-- name: jobs_dead_rows
-- The jobs table's dead rows, as the statistics collector last counted them.
SELECT coalesce(n_dead_tup, 0)
FROM pg_stat_user_tables
WHERE relid = 'pgenough.jobs'::regclass

-- name: vacuum_jobs
-- Reclaim the jobs table's dead rows now; a vacuum already running on it is not waited for.
VACUUM (SKIP_LOCKED) pgenough.jobs

-- name: job_failures_since
-- What went wrong with jobs in the window: jobs dead-lettered, and failed attempts recorded
-- (on jobs still kept: retrying or dead).
SELECT
    (SELECT count(*) FROM pgenough.jobs
     WHERE state = 'dead' AND finished_at > now() - %(window)s * interval '1 second')
        AS dead,
    (SELECT count(*) FROM pgenough.jobs j, jsonb_array_elements(j.errors) e
     WHERE j.last_error IS NOT NULL
       AND (e ->> 'at')::timestamptz > now() - %(window)s * interval '1 second')
        AS attempts_failed

-- name: job_failures_by_queue
-- job_failures_since per queue, for the queues that have any.
SELECT queue,
       count(*) FILTER (WHERE state = 'dead'
                        AND finished_at > now() - %(window)s * interval '1 second') AS dead,
       coalesce(sum((SELECT count(*) FROM jsonb_array_elements(j.errors) e
                     WHERE (e ->> 'at')::timestamptz
                           > now() - %(window)s * interval '1 second'))
                FILTER (WHERE last_error IS NOT NULL), 0)::bigint AS attempts_failed
FROM pgenough.jobs j
WHERE state = 'dead' OR last_error IS NOT NULL
GROUP BY queue
ORDER BY queue

-- name: jobs_by_payload
-- The jobs of a queue and kind whose payload has a key of a value (as text), oldest first:
-- waiting, running, failing, dead or cancelled (completed ones are deleted).
SELECT id, queue, kind, payload, priority, state::text, attempts, max_attempts, run_at,
       created_at, claimed_at, lease_until, worker, finished_at, dedupe_key, last_error, errors
FROM pgenough.jobs
WHERE queue = %(queue)s AND kind = %(kind)s AND payload ->> %(key)s::text = %(value)s::text
ORDER BY id

-- name: cancelled_among
-- The heartbeat's look at jobs in flight whose lease it could not extend: which of them an
-- operator cancelled (the others finished or were reclaimed).
SELECT id FROM pgenough.jobs WHERE id = ANY(%(ids)s::bigint[]) AND state = 'cancelled'
