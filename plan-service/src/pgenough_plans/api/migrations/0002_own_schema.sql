-- The API's secrets move to the plan service's own schema (plans track 0008 creates it).
CREATE SCHEMA IF NOT EXISTS plans;
ALTER TABLE pgenough.api_secrets SET SCHEMA plans;
