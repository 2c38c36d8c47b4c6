-- Memory limit of each of the tenant's browsers, in MiB; 0: the server's --worker-memory-mb.
ALTER TABLE tenants ADD COLUMN max_memory_mb BIGINT NOT NULL DEFAULT 0;
