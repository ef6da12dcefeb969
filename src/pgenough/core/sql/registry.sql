-- name: register
-- A worker process starting: its row (a restarted worker of the same name takes it over).
INSERT INTO pgenough.workers (name, host, pid, queues)
VALUES (%(name)s, %(host)s, %(pid)s, %(queues)s)
ON CONFLICT (name) DO UPDATE
    SET host = EXCLUDED.host, pid = EXCLUDED.pid, queues = EXCLUDED.queues,
        started_at = now(), last_seen_at = now()

-- name: beat
-- A running worker's heartbeat; its row put back if the cleaner took it (a worker cut off for
-- longer than the retention, then healed).
INSERT INTO pgenough.workers (name, host, pid, queues)
VALUES (%(name)s, %(host)s, %(pid)s, %(queues)s)
ON CONFLICT (name) DO UPDATE SET last_seen_at = now()

-- name: deregister
-- A worker stopping: gone from the list at once.
DELETE FROM pgenough.workers WHERE name = %(name)s

-- name: list_workers
-- Every registered worker, the live first (heartbeat within %(alive)s seconds), each with the
-- jobs it runs (those its executors hold: jobs.worker is its name, or name/queue), oldest
-- claim first, at most %(jobs)s of them.
SELECT w.name, w.host, w.pid, w.queues, w.started_at, w.last_seen_at,
       w.last_seen_at > now() - %(alive)s * interval '1 second' AS alive,
       extract(epoch FROM now() - w.last_seen_at)::float8 AS seen_ago,
       coalesce(r.running, 0) AS running_count,
       coalesce(r.jobs, '[]'::jsonb) AS running
FROM pgenough.workers w
LEFT JOIN LATERAL (
    SELECT count(*) AS running,
           jsonb_agg(jsonb_build_object(
               'id', j.id, 'queue', j.queue, 'kind', j.kind, 'attempts', j.attempts,
               'claimed_at', j.claimed_at) ORDER BY j.claimed_at, j.id)
               FILTER (WHERE j.n <= %(jobs)s) AS jobs
    FROM (
        SELECT j.*, row_number() OVER (ORDER BY j.claimed_at, j.id) AS n
        FROM pgenough.jobs j
        WHERE j.lease_until IS NOT NULL
          AND (j.worker = w.name OR left(j.worker, length(w.name) + 1) = w.name || '/')
    ) j
) r ON true
ORDER BY alive DESC, w.started_at, w.name

-- name: forget_gone
-- The cleaner: rows of workers not seen for %(retention)s seconds (died without stopping).
DELETE FROM pgenough.workers
WHERE last_seen_at < now() - %(retention)s * interval '1 second'
