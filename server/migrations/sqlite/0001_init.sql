-- Tenants: quotas and navigation policy. The `default` tenant is created on first start.
CREATE TABLE tenants (
    id                     TEXT PRIMARY KEY,
    max_slots              INTEGER NOT NULL,
    max_queue              INTEGER NOT NULL,
    max_session_ttl_ms     INTEGER NOT NULL,
    idle_timeout_ms        INTEGER NOT NULL,
    allow_hosts            TEXT NOT NULL DEFAULT '[]',
    allow_private_networks INTEGER NOT NULL DEFAULT 0,
    created_at_ms          INTEGER NOT NULL
);

-- Sessions: who owns it, which worker, where it is now. Never deleted: history is the record.
CREATE TABLE sessions (
    id               TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    subject          TEXT NOT NULL,
    worker_id        TEXT NOT NULL,
    state            TEXT NOT NULL,
    labels           TEXT NOT NULL DEFAULT '{}',
    created_at_ms    INTEGER NOT NULL,
    expires_at_ms    INTEGER NOT NULL,
    idle_deadline_ms INTEGER NOT NULL,
    queue_wait_ms    INTEGER NOT NULL DEFAULT 0,
    ended_at_ms      INTEGER,
    end_reason       TEXT
);
CREATE INDEX sessions_by_tenant ON sessions (tenant, created_at_ms, id);
CREATE INDEX sessions_by_state ON sessions (state);

-- Every state change of every session, with its time, in order.
CREATE TABLE session_transitions (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions (id),
    state      TEXT NOT NULL,
    at_ms      INTEGER NOT NULL,
    reason     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX session_transitions_by_session ON session_transitions (session_id, seq);
