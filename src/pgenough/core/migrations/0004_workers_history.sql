-- What the dashboard and `pgenough status` show beyond the jobs themselves.

-- Live workers: one row per worker process, written at its start, its heartbeat moved forward
-- every few seconds while it runs, deleted when it stops. A row whose heartbeat is old is a
-- worker that died (kill -9, a lost host): shown as gone, removed by the cleaner. What each
-- runs is read from the jobs it holds (jobs.worker is its name, or name/queue).
CREATE TABLE pgenough.workers (
    name          text PRIMARY KEY,
    host          text NOT NULL,
    pid           integer NOT NULL,
    queues        text[] NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now()
);

-- Throughput per queue and minute: each worker adds what its executors finished since its
-- last flush (every few seconds, one statement), so completed jobs, which are deleted, are
-- still counted. Kept for the history retention, then deleted by the cleaner.
CREATE TABLE pgenough.job_counts (
    bucket     timestamptz NOT NULL,
    queue      text NOT NULL,
    completed  bigint NOT NULL DEFAULT 0,
    failed     bigint NOT NULL DEFAULT 0,
    dead       bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, queue)
);

-- Backlog per queue over time: the depths of every queue, sampled once a minute across all
-- workers (a periodic duty), likewise kept for the history retention.
CREATE TABLE pgenough.queue_samples (
    at                timestamptz NOT NULL,
    queue             text NOT NULL,
    ready             bigint NOT NULL,
    scheduled         bigint NOT NULL,
    running           bigint NOT NULL,
    dead              bigint NOT NULL,
    oldest_ready_age  double precision NOT NULL,
    PRIMARY KEY (at, queue)
);

-- Periodic tasks: when a tick last ran (claimed_at also moves for a tick recorded or skipped
-- without running), by which replica, and how many ticks passed without running (skipped as
-- late, or dropped while no replica was up).
ALTER TABLE pgenough.periodic
    ADD COLUMN last_run_at timestamptz,
    ADD COLUMN last_run_by text,
    ADD COLUMN missed bigint NOT NULL DEFAULT 0;
UPDATE pgenough.periodic SET last_run_at = claimed_at, last_run_by = claimed_by
WHERE claimed_by IS NOT NULL;
