-- Replicas sharing this database, each with a heartbeat; a replica whose heartbeat is stale is
-- gone, and so are its sessions and slot claims.
CREATE TABLE replicas (
    id            TEXT PRIMARY KEY,
    started_at_ms INTEGER NOT NULL,
    heartbeat_ms  INTEGER NOT NULL
);

-- The replica that runs a session ('' for sessions of runs before replicas were recorded).
ALTER TABLE sessions ADD COLUMN replica TEXT NOT NULL DEFAULT '';

-- Tenant slots held across replicas: a row per admitted session, counted under the tenant's
-- lock row so two replicas cannot both take the last slot.
CREATE TABLE slot_claims (
    id            TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    replica       TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX slot_claims_by_tenant ON slot_claims (tenant);

-- Named locks: upserting a row takes its write lock until the transaction ends.
CREATE TABLE locks (
    name TEXT PRIMARY KEY,
    n    INTEGER NOT NULL
);
