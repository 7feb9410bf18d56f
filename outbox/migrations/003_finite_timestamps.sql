-- Timestamps must be points in time. A timestamptz column accepts
-- 'infinity' and '-infinity', which Go's time.Time cannot hold, so a row
-- holding one (written by a producer other than Publish) cannot be read
-- into a Row. The relay reads such a row as that row's own error and makes
-- it dead; these checks keep new ones out.
--
-- Writers are held off for the few statements below, so no such row can
-- be written between the UPDATE that deals with the existing ones and the
-- checks that refuse new ones.
LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE;

-- Pending rows that already hold one are made dead, saying which column:
-- a check added NOT VALID still applies to every UPDATE of a row, so the
-- relay's claim would otherwise fail on them — and with them, on every row
-- of the same batch. The bad value is kept for the operator to see.
UPDATE {table} SET
    state       = 'dead',
    finished_at = now(),
    claimed_by  = NULL,
    last_error  = concat_ws('; ',
        CASE WHEN NOT isfinite(created_at) THEN format('created_at is %s', created_at) END,
        CASE WHEN NOT isfinite(inserted_at) THEN format('inserted_at is %s', inserted_at) END,
        CASE WHEN NOT isfinite(available_at) THEN format('available_at is %s', available_at) END,
        CASE WHEN NOT isfinite(finished_at) THEN format('finished_at is %s', finished_at) END)
        || ', not a point in time; made dead when the finite-timestamp checks were added'
WHERE state = 'pending'
    AND NOT (isfinite(created_at) AND isfinite(inserted_at) AND isfinite(available_at)
        AND coalesce(isfinite(finished_at), true));

-- NOT VALID: rows that are already finished (delivered or dead) keep their
-- values, so a table holding one still migrates instead of failing here
-- and leaving every relay refusing to start at the old schema version;
-- Outbox.Dead and Purge report such a row with its DecodeErr. It also
-- spares a scan of the whole table under this lock. The checks still
-- apply to every row written or updated from now on. Once no such row is
-- left, ALTER TABLE … VALIDATE CONSTRAINT marks them valid.
ALTER TABLE {table}
    ADD CONSTRAINT {table_created_at_check} CHECK (isfinite(created_at)) NOT VALID,
    ADD CONSTRAINT {table_inserted_at_check} CHECK (isfinite(inserted_at)) NOT VALID,
    ADD CONSTRAINT {table_available_at_check} CHECK (isfinite(available_at)) NOT VALID,
    ADD CONSTRAINT {table_finished_at_check} CHECK (finished_at IS NULL OR isfinite(finished_at)) NOT VALID;
