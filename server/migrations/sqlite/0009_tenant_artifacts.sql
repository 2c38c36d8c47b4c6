-- What a tenant's sessions leave behind: whether they are recorded by default (0 off, 1 on,
-- 2 kept on failure), the largest upload, the bytes it may keep, and for how long (0: the
-- server's limits).
ALTER TABLE tenants ADD COLUMN default_record INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tenants ADD COLUMN max_file_mb INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tenants ADD COLUMN max_artifact_mb INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tenants ADD COLUMN artifact_ttl_s INTEGER NOT NULL DEFAULT 0;
