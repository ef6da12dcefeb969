-- name: create_staging
-- A run's own staging table (dropped whole when the run ends: no vacuum debt). UNLOGGED: its
-- rows are written to no WAL, so staging a snapshot costs no WAL writes, fsyncs or
-- replication, and a standby replays nothing of it. A crash of the server, or a standby
-- promoted in its place, empties it (staging_size): apply_chunk then fails the run, and the
-- provider's next fetch starts over.
CREATE UNLOGGED TABLE {staging} (
    seq                   bigint NOT NULL,
    base_plan_id          text NOT NULL,
    plan_id               text NOT NULL,
    -- Computed by the server as rows arrive, on the core the fetch worker leaves idle.
    id                    uuid NOT NULL
        GENERATED ALWAYS AS (plans.plan_uuid({provider}, base_plan_id, plan_id)) STORED,
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

-- name: staging_size
-- Bytes of a run's staging table (NULL: there is none). A sealed run's is never empty unless
-- a crash or a promotion reset it, as PostgreSQL resets every unlogged table.
SELECT pg_relation_size(to_regclass(%(table)s))

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
--
-- Which listing gives a plan's content: its last listing (the highest seq) in the newest
-- snapshot that contains it. Within a snapshot merge_duplicates has settled that at seal:
-- each plan is one staged row by then, so chunks of a run never compete for a plan, and
-- whatever the chunking, the order or the concurrency of processing, only the last listing
-- is ever written (never an earlier copy first, never a rewrite when the snapshot comes
-- again). Across snapshots plan_seen keeps, per plan, the (seen_at, seq) of the listing that
-- gave its content, and a row may change the content only when its own (snapshot_at, seq)
-- is greater, lexicographically: a newer snapshot always wins, and seq decides only within
-- one snapshot (a run sealed by an older pgenough, without the merge: copies in different
-- chunks still end with the last; two in one chunk make the upsert refuse the statement,
-- and apply_chunk's bisection applies them apart). Re-applying a chunk moves nothing (equal
-- is not greater), and content is rewritten only when it differs, so re-ingesting a
-- snapshot writes nothing. Rows that lose can still set the sticky ever_online flag.
--
-- Concurrency, READ COMMITTED: a chunk of an older snapshot and one of a newer snapshot may
-- hold the same plan. The second to reach its plan_seen row waits for the first's
-- transaction, and ON CONFLICT DO UPDATE then evaluates its WHERE against the latest
-- committed row, even one this statement's snapshot cannot see; the plans upsert of the
-- statement that moved plan_seen writes the content. The losing row sets ever_online
-- through an upsert too (older), not an UPDATE: an UPDATE would not find a plan row that a
-- transaction committed after this statement's snapshot was taken, and the flag would be
-- lost. A statement locks a plan's plan_seen row before its plans row, and plan_seen rows
-- in key order (src is sorted), so chunks that share plans wait but cannot deadlock.
WITH src AS (
    SELECT seq, base_plan_id, plan_id, id, title, sell_mode, organizer_company_id,
           starts_at, ends_at, sell_from, sell_to, sold_out, min_price, max_price,
           coalesce(listed_online, sell_mode = 'online') AS any_online
    FROM {staging}
    WHERE ctid >= %(lo)s::tid AND ctid < %(hi)s::tid
      AND seq >= %(seq_lo)s AND seq < %(seq_hi)s
    ORDER BY base_plan_id, plan_id
), seen AS (
    INSERT INTO plans.plan_seen AS ps (provider, base_plan_id, plan_id, seen_at, seq, run_id)
    SELECT %(provider)s, base_plan_id, plan_id, %(snapshot_at)s, seq, %(run_id)s FROM src
    ON CONFLICT (provider, base_plan_id, plan_id) DO UPDATE
        SET seen_at = EXCLUDED.seen_at, seq = EXCLUDED.seq, run_id = EXCLUDED.run_id
        WHERE (ps.seen_at, ps.seq) < (EXCLUDED.seen_at, EXCLUDED.seq)
    RETURNING base_plan_id, plan_id
), newest AS (
    INSERT INTO plans.plans AS p (
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
    -- The plan's row exists (committed) whenever its plan_seen row beat this one: the
    -- statement that wrote that plan_seen row wrote the plan too. So this only ever updates;
    -- the content it would insert is never used. A plan this statement already sees
    -- ever-online is left alone (the flag never reverts): no row lock, no write.
    INSERT INTO plans.plans AS p (
        provider, base_plan_id, plan_id, id, title, sell_mode, organizer_company_id,
        starts_at, ends_at, sell_from, sell_to, sold_out, min_price, max_price, ever_online)
    SELECT %(provider)s, s.base_plan_id, s.plan_id, s.id, s.title, s.sell_mode,
           s.organizer_company_id, s.starts_at, s.ends_at, s.sell_from, s.sell_to,
           s.sold_out, s.min_price, s.max_price, true
    FROM src s
    WHERE s.any_online
      AND NOT EXISTS (SELECT 1 FROM seen
                      WHERE seen.base_plan_id = s.base_plan_id AND seen.plan_id = s.plan_id)
      -- One probe by key per row, as a scalar subquery: PostgreSQL never turns that into a
      -- join. Written as NOT EXISTS it became an anti join, which the planner, on the
      -- statistics of a plans table far smaller than it had grown within the run, made a
      -- Merge Anti Join over a sort of every plan of the provider: each chunk read the whole
      -- table (issue 33; tests/plan_service/ingest/test_apply_plan.py).
      AND (SELECT e.ever_online FROM plans.plans e
           WHERE e.provider = %(provider)s AND e.base_plan_id = s.base_plan_id
             AND e.plan_id = s.plan_id) IS NOT TRUE
    ON CONFLICT (provider, base_plan_id, plan_id) DO UPDATE
        SET ever_online = true
        WHERE NOT p.ever_online
    RETURNING 1
)
SELECT (SELECT count(*) FROM src), (SELECT count(*) FROM newest) + (SELECT count(*) FROM older)

-- name: count_duplicates
-- Listings of a plan that the run's snapshot had already listed: staged rows minus distinct
-- plans (id is the plan's identity, computed as rows arrived). One pass at seal time: 0.27 s
-- for 1M staged rows on PostgreSQL 15, against 0.39 s for a GROUP BY id (its hash spills).
SELECT count(*) - count(DISTINCT id) FROM {staging}

-- name: merge_duplicates
-- Only when count_duplicates found some, before the seal: every plan listed more than once
-- becomes one row, its last listing (seq and content), online if any listing was. The old
-- rows stay dead in their pages (the table is dropped whole, never vacuumed); the merged
-- ones go to new pages at the end, which the chunk ranges, taken after this, cover.
WITH dups AS (
    SELECT id, max(seq) AS last_seq, bool_or(sell_mode = 'online') AS any_online
    FROM {staging}
    GROUP BY id
    HAVING count(*) > 1
), gone AS (
    DELETE FROM {staging} s
    USING dups d
    WHERE s.id = d.id
    RETURNING s.*, d.last_seq, d.any_online AS merged_online
)
INSERT INTO {staging} (seq, base_plan_id, plan_id, title, sell_mode, organizer_company_id,
                       starts_at, ends_at, sell_from, sell_to, sold_out, min_price,
                       max_price, listed_online)
SELECT seq, base_plan_id, plan_id, title, sell_mode, organizer_company_id, starts_at, ends_at,
       sell_from, sell_to, sold_out, min_price, max_price, merged_online
FROM gone
WHERE seq = last_seq

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
INSERT INTO plans.plan_failures (run_id, seq, base_plan_id, plan_id, error)
VALUES (%(run_id)s, %(seq)s, %(base_plan_id)s, %(plan_id)s, %(error)s)
ON CONFLICT (run_id, seq) DO UPDATE SET error = EXCLUDED.error, at = now()

-- name: staging_pages
-- How many heap pages the run's staging table has (chunks are page ranges).
SELECT (pg_relation_size(%(table)s::regclass) / current_setting('block_size')::int)::bigint

-- name: plans_dead_rows
-- The plans table's dead row versions and live rows, as the statistics last counted them.
SELECT coalesce(n_dead_tup, 0), coalesce(n_live_tup, 0)
FROM pg_stat_user_tables
WHERE relid = 'plans.plans'::regclass

-- name: vacuum_plans
-- Reclaim the plans table's dead rows and set its pages all-visible again, so that /search's
-- index-only scans stop visiting the heap; a vacuum already running on it is not waited for.
VACUUM (SKIP_LOCKED) plans.plans
