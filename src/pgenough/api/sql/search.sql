-- name: page
-- One keyset page of ever-online plans inside [starts_at, ends_at], ordered by start then
-- id: those after the key (after_start, after_id), skipping offset plans first. The key is
-- the previous page's last plan, or (starts_at, the nil UUID) for a first page: every plan
-- id is a version 3 UUID, above the nil one, so that is "starts at or after starts_at". One
-- lower bound, as a row comparison: beside a separate starts_at >= ..., the btree scan may
-- start from the row bound, at the index's first entry. Returns the page's events as JSON
-- objects joined by commas, ready for the response body (PostgreSQL builds them, for the
-- page's plans only, not for the skipped ones: numeric prices stay exact JSON numbers; dates
-- and times are UTC; a plan without an end or without prices has nulls), whether more
-- follow, and the key of the page's last plan (limit + 1 plans are read to know).
-- A plan without an end (ends_at NULL) is read as ending at infinity: it matches only when
-- no ends_at is given (the Fever spec's rule, as plan-service has it). Every event that has
-- an end ends at or after it starts (a CHECK on plans), and one without an end cannot match
-- an ends_at, so the end bound also bounds the start and the index range scan on
-- plans_search_idx (starts_at, id) runs from the key to ends_at. The index carries every
-- other column read here (plans migration 0007), so the scan reads no heap page of a plan
-- not changed since the last vacuum, the offset's skipped plans included.
SELECT string_agg(json_build_object(
           'id', e.id,
           'title', e.title,
           'start_date', to_char(e.starts_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
           'start_time', to_char(e.starts_at AT TIME ZONE 'UTC', 'HH24:MI:SS'),
           'end_date', to_char(e.ends_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
           'end_time', to_char(e.ends_at AT TIME ZONE 'UTC', 'HH24:MI:SS'),
           'min_price', e.min_price,
           'max_price', e.max_price
       )::text, ',' ORDER BY e.n) FILTER (WHERE e.n <= %(limit)s),
       count(*) > %(limit)s,
       max(e.starts_at) FILTER (WHERE e.n = %(limit)s),
       max(e.id::text) FILTER (WHERE e.n = %(limit)s)
FROM (
    SELECT r.*, row_number() OVER (ORDER BY r.starts_at, r.id) AS n
    FROM (
        SELECT p.id, p.title, p.starts_at, p.ends_at, p.min_price, p.max_price
        FROM pgenough.plans p
        WHERE p.ever_online
          AND (p.starts_at, p.id) > (%(after_start)s::timestamptz, %(after_id)s::uuid)
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
