-- name: page
-- One keyset page of ever-online plans inside [starts_at, ends_at], ordered by start then
-- id, after the key (after_start, after_id) when one is given, skipping offset plans first:
-- the page's events as JSON objects joined by commas, ready for the response body
-- (PostgreSQL builds them: numeric prices stay exact JSON numbers; dates and times are UTC;
-- a plan without an end or without prices has nulls), whether more follow, and the key of
-- the page's last plan (read limit + 1 plans to know). A plan without an end (ends_at NULL)
-- is read as ending at infinity: it matches only when no ends_at is given (the Fever spec's
-- rule, as plan-service has it). Every event that has an end ends at or after it starts (a
-- CHECK on plans), and one without an end cannot match an ends_at, so the end bound also
-- bounds the start and the index range scan on plans_search_idx (starts_at, id) runs from
-- the key (or starts_at) to ends_at.
SELECT string_agg(e.event, ',' ORDER BY e.n) FILTER (WHERE e.n <= %(limit)s),
       count(*) > %(limit)s,
       max(e.starts_at) FILTER (WHERE e.n = %(limit)s),
       max(e.id::text) FILTER (WHERE e.n = %(limit)s)
FROM (
    SELECT r.starts_at, r.id, r.event, row_number() OVER (ORDER BY r.starts_at, r.id) AS n
    FROM (
        SELECT p.starts_at, p.id, json_build_object(
            'id', p.id,
            'title', p.title,
            'start_date', to_char(p.starts_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
            'start_time', to_char(p.starts_at AT TIME ZONE 'UTC', 'HH24:MI:SS'),
            'end_date', to_char(p.ends_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
            'end_time', to_char(p.ends_at AT TIME ZONE 'UTC', 'HH24:MI:SS'),
            'min_price', p.min_price,
            'max_price', p.max_price
        )::text AS event
        FROM pgenough.plans p
        WHERE p.ever_online
          AND p.starts_at >= coalesce(%(starts_at)s::timestamptz, '-infinity')
          AND (p.starts_at, p.id) > (coalesce(%(after_start)s::timestamptz, '-infinity'),
                                     %(after_id)s::uuid)
          AND p.starts_at <= coalesce(%(ends_at)s::timestamptz, 'infinity')
          AND coalesce(p.ends_at, 'infinity') <= coalesce(%(ends_at)s::timestamptz, 'infinity')
        ORDER BY p.starts_at, p.id
        LIMIT %(limit)s + 1 OFFSET %(offset)s
    ) r
) e

-- name: snapshot
-- A search streamed in pages reads them all from one snapshot: no event is sent twice or
-- missed because ingestion committed between two pages.
BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY

-- name: end_snapshot
COMMIT

-- name: delay
-- Tests and demos only (api_search_delay): a slow search's time, spent in PostgreSQL.
SELECT pg_sleep(%(seconds)s)

-- name: ready
-- Readiness: the database answers.
SELECT 1

-- name: plans_readable
-- Start-up: the schema is migrated and this role may read the plans.
SELECT 1 FROM pgenough.plans LIMIT 0
