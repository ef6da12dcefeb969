-- Fleet-wide concurrency limits: at most max_running jobs of a queue run at once across every
-- worker. The plain claim takes nothing of a queue listed here; the limited claim takes a
-- transaction-level advisory lock per queue, counts the queue's running jobs and claims at
-- most the rest (limits.py). A killed worker's jobs count until the rescuer takes them back.
CREATE TABLE pgenough.queue_limits (
    queue        text PRIMARY KEY,
    max_running  integer NOT NULL CHECK (max_running > 0),
    set_at       timestamptz NOT NULL DEFAULT now()
);
