-- pgenough.plan_uuid, the same ids, 4x cheaper: every staged row computes one (the staging
-- table's generated id column, on the COPY's backend). The SQL body's sub-SELECT is run as a
-- sub-plan per call (~20 us per row under load, PostgreSQL 15); PL/pgSQL evaluates these
-- expressions on its fast path (~5 us; 200k rows gave identical ids). Not a single SQL
-- expression: convert_to is STABLE, so an IMMUTABLE SQL function using it is never inlined,
-- and one expression would hash twice.
CREATE OR REPLACE FUNCTION pgenough.plan_uuid(provider text, base_plan_id text, plan_id text)
RETURNS uuid
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    h text := md5('\x6f1c2b7e3d4a5b8c9e0fa1b2c3d4e5f6'::bytea
                  || convert_to(provider || chr(31) || base_plan_id || chr(31) || plan_id, 'UTF8'));
BEGIN
    -- version 3 in the 13th hex digit, the RFC 4122 variant (8, 9, a or b) in the 17th
    RETURN overlay(overlay(h PLACING '3' FROM 13 FOR 1)
                   PLACING translate(substr(h, 17, 1), '0123456789abcdef', '89ab89ab89ab89ab')
                   FROM 17 FOR 1)::uuid;
END
$$;
