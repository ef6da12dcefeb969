-- /search answered from the index alone: plans_search_idx carries every column a page
-- returns or filters on, so a page is an index-only scan (the offset's skipped plans and the
-- page's own are read from the index's leaf pages, not from scattered heap pages: starts_at
-- is not correlated with the heap's order). At 1M plans a cold page with an offset of up to
-- 1,000 read about 400 heap pages and took 2.3-2.6 ms; with the index alone, 1.3-1.5 ms
-- (docs/plan-service/benchmarks-history.md, "API: the cost of one search"). Pages of plans
-- updated since the last vacuum are still read from the heap (the visibility map), so it
-- degrades, never breaks.
-- The index is about 1.9x the size (78 against 42 MB at 1M plans) and is written by every
-- insert and non-HOT update of an ever-online plan.
-- Built in the migration's transaction: writers to plans wait for the build (readers do not,
-- until the swap at commit); at 1M plans it takes a few seconds.
CREATE INDEX plans_search_covering_idx ON pgenough.plans (starts_at, id)
    INCLUDE (ends_at, title, min_price, max_price)
    WHERE ever_online;
DROP INDEX pgenough.plans_search_idx;
ALTER INDEX pgenough.plans_search_covering_idx RENAME TO plans_search_idx;
