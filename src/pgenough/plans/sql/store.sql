-- name: create_staging
-- A run's own staging table (dropped whole when the run ends: no vacuum debt).
CREATE TABLE {staging} (
    seq                   bigint NOT NULL,
    base_plan_id          text NOT NULL,
    plan_id               text NOT NULL,
    -- Computed by the server as rows arrive, on the core the fetch worker leaves idle.
    id                    uuid NOT NULL
        GENERATED ALWAYS AS (pgenough.plan_uuid({provider}, base_plan_id, plan_id)) STORED,
    title                 text NOT NULL,
    sell_mode             text NOT NULL,
    organizer_company_id  text,
    starts_at             timestamptz NOT NULL,
    -- NULL: no end, no priced zone, sold_out not given (feed.PlanRecord; plans allows it too).
    ends_at               timestamptz,
    sell_from             timestamptz,
    sell_to               timestamptz,
    sold_out              boolean,
    min_price             numeric,
    max_price             numeric,
    -- Set only on a row merge_duplicates made of a plan's several listings: whether any of
    -- them was online. NULL: the row is the plan's only listing (its sell_mode says).
    listed_online         boolean
) WITH (autovacuum_enabled = false)

-- name: truncate_staging
-- Start the staging over (a retried download begins from the first byte).
TRUNCATE {staging}

-- name: analyze_staging
-- Fresh statistics once the run is staged, so chunk statements are planned for real sizes.
ANALYZE {staging}

-- name: drop_staging
-- The run is over.
DROP TABLE IF EXISTS {staging}

-- name: copy_staging
-- Bulk-load parsed plans.
COPY {staging} (seq, base_plan_id, plan_id, title, sell_mode, organizer_company_id,
                starts_at, ends_at, sell_from, sell_to, sold_out, min_price, max_price)
FROM STDIN

-- name: apply_rows
-- Upsert the staged rows of a page range (and seq range) into the canonical tables, set-based.
-- plan_seen keeps the newest snapshot that contained each plan; only rows for which this
-- run is that newest snapshot may change a plan's content, and only when the content
-- differs (so re-ingesting a snapshot writes nothing). Rows from an older snapshot can
-- still set the sticky ever_online flag.
WITH src AS (
    -- A plan listed twice in one snapshot: its first listing gives the content, any
    -- listing can make it ever-online.
    SELECT DISTINCT ON (base_plan_id, plan_id) *,
           bool_or(sell_mode = 'online') OVER (PARTITION BY base_plan_id, plan_id) AS any_online
    FROM {staging}
    WHERE ctid >= %(lo)s::tid AND ctid < %(hi)s::tid
      AND seq >= %(seq_lo)s AND seq < %(seq_hi)s
    ORDER BY base_plan_id, plan_id, seq
), seen AS (
    INSERT INTO pgenough.plan_seen AS ps (provider, base_plan_id, plan_id, seen_at, run_id)
    SELECT %(provider)s, base_plan_id, plan_id, %(snapshot_at)s, %(run_id)s FROM src
    ON CONFLICT (provider, base_plan_id, plan_id) DO UPDATE
        SET seen_at = EXCLUDED.seen_at, run_id = EXCLUDED.run_id
        WHERE ps.seen_at < EXCLUDED.seen_at
    RETURNING base_plan_id, plan_id
), newest AS (
    INSERT INTO pgenough.plans AS p (
        provider, base_plan_id, plan_id, id, title, sell_mode, organizer_company_id,
        starts_at, ends_at, sell_from, sell_to, sold_out, min_price, max_price, ever_online)
    SELECT %(provider)s, s.base_plan_id, s.plan_id, s.id, s.title, s.sell_mode,
           s.organizer_company_id, s.starts_at, s.ends_at, s.sell_from, s.sell_to,
           s.sold_out, s.min_price, s.max_price, s.any_online
    FROM src s JOIN seen USING (base_plan_id, plan_id)
    ON CONFLICT (provider, base_plan_id, plan_id) DO UPDATE
        SET title = EXCLUDED.title, sell_mode = EXCLUDED.sell_mode,
            organizer_company_id = EXCLUDED.organizer_company_id,
            starts_at = EXCLUDED.starts_at, ends_at = EXCLUDED.ends_at,
            sell_from = EXCLUDED.sell_from, sell_to = EXCLUDED.sell_to,
            sold_out = EXCLUDED.sold_out, min_price = EXCLUDED.min_price,
            max_price = EXCLUDED.max_price, ever_online = p.ever_online OR EXCLUDED.ever_online
        WHERE (p.title, p.sell_mode, p.organizer_company_id, p.starts_at, p.ends_at,
               p.sell_from, p.sell_to, p.sold_out, p.min_price, p.max_price)
              IS DISTINCT FROM
              (EXCLUDED.title, EXCLUDED.sell_mode, EXCLUDED.organizer_company_id,
               EXCLUDED.starts_at, EXCLUDED.ends_at, EXCLUDED.sell_from, EXCLUDED.sell_to,
               EXCLUDED.sold_out, EXCLUDED.min_price, EXCLUDED.max_price)
           OR (EXCLUDED.ever_online AND NOT p.ever_online)
    RETURNING 1
), older AS (
    UPDATE pgenough.plans p
    SET ever_online = true
    FROM src s
    WHERE s.any_online AND NOT p.ever_online
      AND p.provider = %(provider)s AND p.base_plan_id = s.base_plan_id
      AND p.plan_id = s.plan_id
      AND NOT EXISTS (SELECT 1 FROM seen
                      WHERE seen.base_plan_id = s.base_plan_id AND seen.plan_id = s.plan_id)
    RETURNING 1
)
SELECT (SELECT count(*) FROM src), (SELECT count(*) FROM newest) + (SELECT count(*) FROM older)

-- name: chunk_seq_bounds
-- The seq range of a page range (for isolating a poison row by bisection).
SELECT min(seq), max(seq) + 1
FROM {staging}
WHERE ctid >= %(lo)s::tid AND ctid < %(hi)s::tid

-- name: row_at
-- One staged row's identity (for recording a poison row).
SELECT base_plan_id, plan_id
FROM {staging}
WHERE ctid >= %(lo)s::tid AND ctid < %(hi)s::tid AND seq = %(seq)s

-- name: record_failure
-- A row that could not be written, and why.
INSERT INTO pgenough.plan_failures (run_id, seq, base_plan_id, plan_id, error)
VALUES (%(run_id)s, %(seq)s, %(base_plan_id)s, %(plan_id)s, %(error)s)
ON CONFLICT (run_id, seq) DO UPDATE SET error = EXCLUDED.error, at = now()
