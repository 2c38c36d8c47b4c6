-- The PostgreSQL schema: the same tables as the SQLite migrations 0001-0004, with PostgreSQL
-- types (BIGINT for every millisecond and count, BOOLEAN, identity columns).

-- Tenants: quotas and navigation policy. The `default` tenant is created on first start.
CREATE TABLE tenants (
    id                     TEXT PRIMARY KEY,
    max_slots              BIGINT NOT NULL,
    max_queue              BIGINT NOT NULL,
    max_session_ttl_ms     BIGINT NOT NULL,
    idle_timeout_ms        BIGINT NOT NULL,
    allow_hosts            TEXT NOT NULL DEFAULT '[]',
    allow_private_networks BOOLEAN NOT NULL DEFAULT FALSE,
    created_at_ms          BIGINT NOT NULL
);

-- Sessions: who owns it, which replica and worker, where it is now. Never deleted.
CREATE TABLE sessions (
    id               TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    subject          TEXT NOT NULL,
    worker_id        TEXT NOT NULL,
    state            TEXT NOT NULL,
    labels           TEXT NOT NULL DEFAULT '{}',
    created_at_ms    BIGINT NOT NULL,
    expires_at_ms    BIGINT NOT NULL,
    idle_deadline_ms BIGINT NOT NULL,
    queue_wait_ms    BIGINT NOT NULL DEFAULT 0,
    ended_at_ms      BIGINT,
    end_reason       TEXT,
    replica          TEXT NOT NULL DEFAULT ''
);
CREATE INDEX sessions_by_tenant ON sessions (tenant, created_at_ms, id);
CREATE INDEX sessions_by_state ON sessions (state);

-- Every state change of every session, with its time, in order.
CREATE TABLE session_transitions (
    seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id),
    state      TEXT NOT NULL,
    at_ms      BIGINT NOT NULL,
    reason     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX session_transitions_by_session ON session_transitions (session_id, seq);

-- Revoked token ids (jti): checked on every call through an in-memory cache refreshed often.
CREATE TABLE revoked_tokens (
    jti           TEXT PRIMARY KEY,
    revoked_at_ms BIGINT NOT NULL
);

-- The audit trail: append-only, hash-chained (hash = SHA-256(prev_hash || canonical record)).
CREATE TABLE audit (
    seq         BIGINT PRIMARY KEY,
    at_ms       BIGINT NOT NULL,
    tenant      TEXT NOT NULL,
    subject     TEXT NOT NULL,
    jti_hash    TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    rpc         TEXT NOT NULL,
    action      TEXT NOT NULL,
    alias_of    TEXT NOT NULL,
    target      TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    code        TEXT NOT NULL,
    duration_ms BIGINT NOT NULL,
    prev_hash   TEXT NOT NULL,
    hash        TEXT NOT NULL
);
CREATE INDEX audit_by_session ON audit (session_id, seq);
CREATE INDEX audit_by_tenant ON audit (tenant, seq);
CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only';
END
$$;
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit FOR EACH ROW EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit FOR EACH ROW EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();

-- Replicas sharing this database, each with a heartbeat; a replica whose heartbeat is stale is
-- gone, and so are its sessions and slot claims.
CREATE TABLE replicas (
    id            TEXT PRIMARY KEY,
    started_at_ms BIGINT NOT NULL,
    heartbeat_ms  BIGINT NOT NULL
);

-- Tenant slots held across replicas: a row per admitted session, counted under the tenant's
-- lock row so two replicas cannot both take the last slot.
CREATE TABLE slot_claims (
    id            TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    replica       TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX slot_claims_by_tenant ON slot_claims (tenant);

-- Named locks: upserting a row takes its row lock until the transaction ends.
CREATE TABLE locks (
    name TEXT PRIMARY KEY,
    n    BIGINT NOT NULL
);
