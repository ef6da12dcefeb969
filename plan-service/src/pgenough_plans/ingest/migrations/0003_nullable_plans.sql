-- Plans the Fever spec allows without an end, without prices or without sold_out are kept,
-- with NULLs; a plan listed twice in one snapshot is decided by its last listing.

-- Nullable as in the spec. The CHECKs of 0001 hold for NULLs (a CHECK passes on NULL): a plan
-- with an end still never ends before it starts, prices stay non-negative and ordered.
-- DROP NOT NULL only changes the catalog; the new CHECK reads the table once.
ALTER TABLE pgenough.plans
    ALTER COLUMN ends_at DROP NOT NULL,
    ALTER COLUMN sold_out DROP NOT NULL,
    ALTER COLUMN min_price DROP NOT NULL,
    ALTER COLUMN max_price DROP NOT NULL,
    -- A plan has both prices (some zone has a price) or neither (no priced zone).
    ADD CONSTRAINT plans_prices_together CHECK ((min_price IS NULL) = (max_price IS NULL));

-- The listing's position in its snapshot (the staging seq): with seen_at, the stale-snapshot
-- guard compares (seen_at, seq), so the last listing of a plan in a snapshot wins whatever
-- the chunking. Rows seen before this migration have 0: any later listing beats them.
-- A constant default: no table rewrite.
ALTER TABLE pgenough.plan_seen ADD COLUMN seq bigint NOT NULL DEFAULT 0;

-- Listings of a plan that its snapshot had already listed (staged rows - distinct plans).
ALTER TABLE pgenough.runs ADD COLUMN plans_duplicate integer NOT NULL DEFAULT 0;

-- The staging tables of runs in flight (streaming or staged, by an older pgenough) get the
-- column apply_rows now reads; NULL means each row is its plan's only listing. Adding a
-- nullable column without a default only changes the catalog, and its name is new to the old
-- apply_rows (which reads SELECT *), so process workers of either version can apply them.
DO $$
DECLARE
    staging text;
BEGIN
    FOR staging IN
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'pgenough' AND c.relkind = 'r' AND c.relname ~ '^staging_[0-9]+$'
    LOOP
        EXECUTE format(
            'ALTER TABLE pgenough.%I ADD COLUMN IF NOT EXISTS listed_online boolean', staging
        );
    END LOOP;
END
$$;
