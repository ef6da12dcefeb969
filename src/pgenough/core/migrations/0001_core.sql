-- The messaging core: jobs, large pub/sub payloads, periodic-task claims.

CREATE TYPE pgenough.job_state AS ENUM ('ready', 'running', 'dead', 'cancelled');

-- One row per job that is waiting, running, dead-lettered or cancelled.
-- Completed jobs are deleted in the statement that completes them, so the
-- table only ever holds live work plus the dead letters kept for operators.
CREATE TABLE pgenough.jobs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue         text NOT NULL DEFAULT 'default',
    kind          text NOT NULL,
    payload       jsonb NOT NULL DEFAULT 'null'::jsonb,
    priority      integer NOT NULL DEFAULT 0,
    state         pgenough.job_state NOT NULL DEFAULT 'ready',
    attempts      integer NOT NULL DEFAULT 0,
    max_attempts  integer NOT NULL DEFAULT 20 CHECK (max_attempts > 0),
    run_at        timestamptz NOT NULL DEFAULT now(),
    created_at    timestamptz NOT NULL DEFAULT now(),
    claimed_at    timestamptz,
    lease_until   timestamptz,
    worker        text,
    finished_at   timestamptz,
    dedupe_key    text,
    last_error    text,
    errors        jsonb NOT NULL DEFAULT '[]'::jsonb,
    CHECK (state <> 'running' OR lease_until IS NOT NULL)
);

-- The claim path: ready jobs of a queue in priority, then time, order.
CREATE INDEX jobs_claim_idx ON pgenough.jobs (queue, priority DESC, run_at, id)
    WHERE state = 'ready';
-- The rescuer: running jobs by lease expiry.
CREATE INDEX jobs_lease_idx ON pgenough.jobs (lease_until) WHERE state = 'running';
-- The cleaner and operators: finished (dead, cancelled) jobs by age.
CREATE INDEX jobs_finished_idx ON pgenough.jobs (finished_at)
    WHERE state IN ('dead', 'cancelled');
-- A dedupe key is unique among the jobs that are still to run.
CREATE UNIQUE INDEX jobs_dedupe_idx ON pgenough.jobs (queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND state IN ('ready', 'running');

-- Payloads too large for NOTIFY travel by reference through this table.
CREATE TABLE pgenough.messages (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel     text NOT NULL,
    payload     text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX messages_created_idx ON pgenough.messages (created_at);

-- The last period each periodic task was claimed for, across all replicas.
CREATE TABLE pgenough.periodic (
    name        text PRIMARY KEY,
    period      bigint NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT now(),
    claimed_by  text
);
