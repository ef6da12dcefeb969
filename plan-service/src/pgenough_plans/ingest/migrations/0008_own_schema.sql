-- The plan service's objects move to a schema of their own, `plans`: the queue library's schema
-- (`pgenough`) then holds only the library's tables, and a database that runs both shows which
-- product owns what. Fresh databases get there through 0001-0007, which created them in
-- `pgenough` when both were one product. SET SCHEMA keeps every row, index, identity sequence,
-- privilege and dependency (a staging table's generated id calls plan_uuid by its oid).
CREATE SCHEMA IF NOT EXISTS plans;
ALTER TYPE pgenough.run_status SET SCHEMA plans;
ALTER FUNCTION pgenough.plan_uuid(text, text, text) SET SCHEMA plans;
ALTER TABLE pgenough.runs SET SCHEMA plans;
ALTER TABLE pgenough.plans SET SCHEMA plans;
ALTER TABLE pgenough.plan_seen SET SCHEMA plans;
ALTER TABLE pgenough.plan_failures SET SCHEMA plans;
ALTER TABLE pgenough.read_pressure SET SCHEMA plans;
-- The staging tables of runs in flight (a fetch or a processing that spans the upgrade).
DO $$
DECLARE
    staging text;
BEGIN
    FOR staging IN
        SELECT tablename FROM pg_tables
        WHERE schemaname = 'pgenough' AND tablename ~ '^staging_[0-9]+$'
    LOOP
        EXECUTE format('ALTER TABLE pgenough.%I SET SCHEMA plans', staging);
    END LOOP;
END
$$;
