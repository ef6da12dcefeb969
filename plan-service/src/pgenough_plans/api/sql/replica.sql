-- name: primary_lsn
-- On the primary: the end of the WAL inserted so far, past every commit before this call
-- (read after a plans_changed message arrived, past the commit that sent it: NOTIFY is
-- delivered after the commit). The insert position, not pg_current_wal_lsn(): under
-- synchronous_commit = off a commit may be inserted and not yet written. The insert position
-- of a record that would start a WAL page points past the page's header (24 bytes, 40 at a
-- segment's start), where nothing ends: it is given as the page's start, as a standby's
-- pg_last_wal_replay_lsn() gives the end of the last record, so that a standby that has
-- replayed everything (an idle primary, or one after pg_switch_wal()) is not seen behind.
SELECT (CASE
            WHEN p.pos % s.seg = 40 THEN l.lsn - 40
            WHEN p.pos % s.block = 24 THEN l.lsn - 24
            ELSE l.lsn
        END)::text
FROM (SELECT pg_current_wal_insert_lsn() AS lsn) AS l
CROSS JOIN LATERAL (SELECT l.lsn - '0/0'::pg_lsn AS pos) AS p
CROSS JOIN (
    SELECT max(setting::numeric) FILTER (WHERE name = 'wal_segment_size') AS seg,
           max(setting::numeric) FILTER (WHERE name = 'wal_block_size') AS block
    FROM pg_settings
    WHERE name IN ('wal_segment_size', 'wal_block_size')
) AS s

-- name: replayed_lsn
-- On the read replica: the WAL it has replayed up to (NULL when it is not a standby). Read
-- before a search's query, so the query's snapshot holds at least that much.
SELECT pg_last_wal_replay_lsn()::text
