-- Where a session's pages leave through and how much they carried: the upstream proxy it used
-- (NULL: straight out) and the bytes sent and received over the network, written at its end.
-- A tenant's default proxy ('' = none) and its cap on one session's bytes (0 = none).
ALTER TABLE sessions ADD COLUMN proxy_id TEXT;
ALTER TABLE sessions ADD COLUMN bytes_sent BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN bytes_received BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tenants ADD COLUMN default_proxy TEXT NOT NULL DEFAULT '';
ALTER TABLE tenants ADD COLUMN max_session_bytes BIGINT NOT NULL DEFAULT 0;
