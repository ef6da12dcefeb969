-- The schedule a periodic task's period was claimed under ('every 60.0s',
-- 'cron 30 2 * * * Europe/Berlin'). A period is only compared with periods of the same
-- schedule, so a task whose schedule changes starts over instead of waiting until its new
-- schedule's periods pass the old one's. Null on rows claimed before this column existed.
-- From now on claimed_by is null when a period was recorded without running (the tick of a
-- first registration, or one skipped as too late).
ALTER TABLE pgenough.periodic ADD COLUMN schedule text;
