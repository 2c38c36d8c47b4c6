-- Upstream proxies sessions may leave through: the upstream's URL, its user name, its password
-- sealed with the data dir's secrets.key (never stored in the clear; NULL: none), the hosts
-- that go direct and the tenants that may use it (JSON arrays).
CREATE TABLE proxies (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    username TEXT NOT NULL,
    password_sealed TEXT,
    direct_hosts TEXT NOT NULL,
    tenants TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
