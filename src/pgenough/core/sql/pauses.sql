-- name: pause_queue
-- Pause a queue (once: pausing a paused queue keeps its first time and reason); the row
-- when this call paused it.
INSERT INTO pgenough.queue_pauses (queue, reason)
VALUES (%(queue)s, %(reason)s)
ON CONFLICT (queue) DO NOTHING
RETURNING queue

-- name: resume_queue
-- Resume a queue and wake its idle workers (on commit); the row when it was paused.
WITH resumed AS (
    DELETE FROM pgenough.queue_pauses WHERE queue = %(queue)s RETURNING queue
)
SELECT queue, pg_notify(%(channel)s, queue) FROM resumed

-- name: paused_queues
SELECT queue, paused_at, reason FROM pgenough.queue_pauses ORDER BY queue
