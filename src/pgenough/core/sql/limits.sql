-- name: set_queue_limit
-- Set (or change) a queue's limit and wake its workers (on commit), which then claim under it.
WITH set AS (
    INSERT INTO pgenough.queue_limits (queue, max_running)
    VALUES (%(queue)s, %(running)s)
    ON CONFLICT (queue) DO UPDATE SET max_running = EXCLUDED.max_running, set_at = now()
    RETURNING queue
)
SELECT queue, pg_notify(%(channel)s, queue) FROM set

-- name: clear_queue_limit
-- Lift a queue's limit and wake its workers (on commit); the row when it had one.
WITH cleared AS (
    DELETE FROM pgenough.queue_limits WHERE queue = %(queue)s RETURNING queue
)
SELECT queue, pg_notify(%(channel)s, queue) FROM cleared

-- name: queue_limits
SELECT queue, max_running, set_at FROM pgenough.queue_limits ORDER BY queue
