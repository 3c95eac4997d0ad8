-- 0040 bounds the pending lists of River's two GIN indexes on river_job
-- (args, metadata) to 64 kB, PostgreSQL's minimum, instead of the 4 MB of
-- gin_pending_list_limit. Every job passes through three row versions
-- (insert, running, finished), each adding entries to both indexes; with a
-- 4 MB pending list the statement that overflows it (a round's COPY, River's
-- fetch) merges it into the index and stalls for up to ~200 ms. Small lists
-- are merged often and quickly. See ADR 0031. A reindex (River's
-- reindexer) keeps these storage parameters.
ALTER INDEX river_job_args_index SET (gin_pending_list_limit = 64);
ALTER INDEX river_job_metadata_index SET (gin_pending_list_limit = 64);
