-- name: search
-- One page of ever-online plans inside [starts_at, ends_at], ordered by start then id, as
-- the complete response body: PostgreSQL builds the JSON (numeric prices stay exact JSON
-- numbers; dates and times are UTC; a plan without an end or without prices has nulls).
-- A plan without an end (ends_at NULL) is read as ending at infinity: it matches only when
-- no ends_at is given (the Fever spec's rule, as plan-service has it). Every event that has
-- an end ends at or after it starts (a CHECK on plans), and one without an end cannot match
-- an ends_at, so the end bound also bounds the start and the index range scan on
-- plans_search_idx (starts_at, id) stops there.
SELECT json_build_object(
    'data', json_build_object('events', coalesce(json_agg(json_build_object(
        'id', p.id,
        'title', p.title,
        'start_date', to_char(p.starts_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
        'start_time', to_char(p.starts_at AT TIME ZONE 'UTC', 'HH24:MI:SS'),
        'end_date', to_char(p.ends_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
        'end_time', to_char(p.ends_at AT TIME ZONE 'UTC', 'HH24:MI:SS'),
        'min_price', p.min_price,
        'max_price', p.max_price
    ) ORDER BY p.starts_at, p.id), '[]'::json)),
    'error', NULL
)::text
FROM (
    SELECT id, title, starts_at, ends_at, min_price, max_price
    FROM pgenough.plans
    WHERE ever_online
      AND starts_at >= coalesce(%(starts_at)s::timestamptz, '-infinity')
      AND starts_at <= coalesce(%(ends_at)s::timestamptz, 'infinity')
      AND coalesce(ends_at, 'infinity') <= coalesce(%(ends_at)s::timestamptz, 'infinity')
    ORDER BY starts_at, id
    LIMIT %(limit)s OFFSET %(offset)s
) p

-- name: delay
-- Tests and demos only (api_search_delay): a slow search's time, spent in PostgreSQL.
SELECT pg_sleep(%(seconds)s)

-- name: ready
-- Readiness: the database answers.
SELECT 1

-- name: plans_readable
-- Start-up: the schema is migrated and this role may read the plans.
SELECT 1 FROM pgenough.plans LIMIT 0
