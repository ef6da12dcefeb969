-- The plan service: ingestion runs, canonical plans, and what could not be written.

CREATE TYPE pgenough.run_status AS ENUM ('RUNNING', 'STAGED', 'PROCESSED', 'FAILED');

-- One row per fetch of one provider's snapshot. Its staged rows live in a table of their
-- own, pgenough.staging_<id>, dropped when the run is processed or fails: no vacuum debt.
CREATE TABLE pgenough.runs (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider        text NOT NULL,
    url             text NOT NULL,
    status          pgenough.run_status NOT NULL DEFAULT 'RUNNING',
    owner           text NOT NULL,
    -- When the fetch started: the snapshot's time for the stale-snapshot guard.
    started_at      timestamptz NOT NULL DEFAULT now(),
    heartbeat_at    timestamptz NOT NULL DEFAULT now(),
    staged_at       timestamptz,
    processed_at    timestamptz,
    failed_at       timestamptz,
    reason          text,
    attempts        jsonb NOT NULL DEFAULT '[]'::jsonb,
    bytes           bigint NOT NULL DEFAULT 0,
    variant         text,
    plans_staged    integer NOT NULL DEFAULT 0,
    plans_skipped   integer NOT NULL DEFAULT 0,
    skip_samples    jsonb NOT NULL DEFAULT '[]'::jsonb,
    chunks_total    integer,
    chunks_done     integer NOT NULL DEFAULT 0,
    plans_written   integer NOT NULL DEFAULT 0,
    rows_failed     integer NOT NULL DEFAULT 0,
    CHECK (status <> 'FAILED' OR reason IS NOT NULL)
);
CREATE INDEX runs_provider_idx ON pgenough.runs (provider, started_at DESC);
CREATE INDEX runs_running_idx ON pgenough.runs (heartbeat_at) WHERE status = 'RUNNING';

-- A plan's API id: the name-based UUID (version 3, RFC 4122) of "provider\x1fbase\x1fplan" in
-- pgenough's namespace; the same as store.plan_uuid() in Python, stable forever.
CREATE FUNCTION pgenough.plan_uuid(provider text, base_plan_id text, plan_id text)
RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (
    SELECT (substr(h, 1, 12) || '3' || substr(h, 14, 3)
            || to_hex((('x' || substr(h, 17, 1))::bit(4)::int & 3) | 8)
            || substr(h, 18))::uuid
    FROM (SELECT md5(decode('6f1c2b7e3d4a5b8c9e0fa1b2c3d4e5f6', 'hex')
                     || convert_to(provider || chr(31) || base_plan_id || chr(31) || plan_id,
                                   'UTF8')) AS h) named
);

-- Canonical plans: only what the newest snapshot containing each plan said. Rewritten only
-- when that content changes, so re-ingesting a snapshot leaves this table untouched.
CREATE TABLE pgenough.plans (
    provider              text NOT NULL,
    base_plan_id          text NOT NULL,
    plan_id               text NOT NULL,
    id                    uuid NOT NULL UNIQUE,
    title                 text NOT NULL,
    sell_mode             text NOT NULL,
    organizer_company_id  text,
    starts_at             timestamptz NOT NULL,
    ends_at               timestamptz NOT NULL,
    sell_from             timestamptz,
    sell_to               timestamptz,
    sold_out              boolean NOT NULL,
    -- Exactly as the provider wrote them (no rounding, no scale limit).
    min_price             numeric NOT NULL CHECK (min_price >= 0),
    max_price             numeric NOT NULL,
    -- Sticky: true once any snapshot showed the plan's base_plan online.
    ever_online           boolean NOT NULL,
    PRIMARY KEY (provider, base_plan_id, plan_id),
    CHECK (min_price <= max_price),
    CHECK (starts_at <= ends_at)
);
CREATE INDEX plans_search_idx ON pgenough.plans (starts_at, id) WHERE ever_online;

-- The newest snapshot that contained each plan: the stale-snapshot guard. Kept apart from
-- plans because it moves with every snapshot while the content mostly does not.
CREATE TABLE pgenough.plan_seen (
    provider      text NOT NULL,
    base_plan_id  text NOT NULL,
    plan_id       text NOT NULL,
    seen_at       timestamptz NOT NULL,
    run_id        bigint NOT NULL,
    PRIMARY KEY (provider, base_plan_id, plan_id)
) WITH (fillfactor = 70);

-- Rows a process worker could not write; their neighbours were written.
CREATE TABLE pgenough.plan_failures (
    run_id        bigint NOT NULL REFERENCES pgenough.runs (id) ON DELETE CASCADE,
    seq           bigint NOT NULL,
    base_plan_id  text,
    plan_id       text,
    error         text NOT NULL,
    at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq)
);
