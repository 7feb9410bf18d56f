-- The claim of unclaimed rows in id order. Plane's own partial index
-- (claimed_at, processed_at, id) holds them, but its leading columns are
-- matched by IS NULL, which gives no order: the claim would sort every
-- unclaimed row, or walk the primary key past every processed one, to find
-- the first batch. This one hands them over in id order, so the claim
-- reads one batch's worth. Built concurrently.
CREATE INDEX CONCURRENTLY IF NOT EXISTS {table_warren_claim_idx} ON {table} (id)
    WHERE claimed_at IS NULL AND processed_at IS NULL;
