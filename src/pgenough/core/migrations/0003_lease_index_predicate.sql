-- The rescuer's index, on what a claim's lease is, not on its state: every row with a lease
-- is a running job (a claim sets lease_until, and every move out of 'running' clears it), so
-- it indexes the same rows. Its predicate was state = 'running', which every statement on a
-- running job by id also implies (complete, fail, the heartbeat, the release, the ack in the
-- claim). Once an ANALYZE had seen a queue with no running job, the planner took the whole
-- index for empty and scanned it for those statements instead of the primary key: every
-- dead entry it held, each one a heap fetch. Steady at 50% of capacity, claims went from 1
-- to 12 ms after the first autoanalyze (issue 20). Only the rescuer's lease_until < now()
-- implies lease_until IS NOT NULL.
DROP INDEX pgenough.jobs_lease_idx;
CREATE INDEX jobs_lease_idx ON pgenough.jobs (lease_until) WHERE lease_until IS NOT NULL;
