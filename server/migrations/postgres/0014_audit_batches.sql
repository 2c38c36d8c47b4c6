-- The id of the batch a record went in with, on the first record of each batch (NULL on the
-- rest and on records from before): a write retried after a commit whose answer was lost (the
-- database's connection cut at that moment) finds its batch already in and is not chained twice.
-- Not part of the hashed record: it says how the record was written, not what happened.
ALTER TABLE audit ADD COLUMN batch TEXT;
CREATE UNIQUE INDEX audit_by_batch ON audit (batch) WHERE batch IS NOT NULL;
