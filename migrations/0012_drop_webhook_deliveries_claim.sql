-- The per-delivery claim of the former unordered sender (claim_job_id, claim_owner, claim_until): nothing has read
-- it since one sender per subscription sends for every policy (its index went in 0004), and the previous release
-- no longer writes it either, so no binary that may run on this schema uses it. Dropping a column only marks it
-- dropped (no rewrite), but takes webhook_deliveries' ACCESS EXCLUSIVE lock, which every round waits for: fail
-- rather than stall them, and run `bothy migrate up` again. A binary that still writes these columns (one from
-- before that release) cannot run on the schema after this file.
SET LOCAL lock_timeout = '2s';

ALTER TABLE webhook_deliveries
    DROP COLUMN IF EXISTS claim_job_id,
    DROP COLUMN IF EXISTS claim_owner,
    DROP COLUMN IF EXISTS claim_until;
