-- The audit trail: append-only, hash-chained (hash = SHA-256(prev_hash || canonical record)).
CREATE TABLE audit (
    seq         INTEGER PRIMARY KEY,
    at_ms       INTEGER NOT NULL,
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
    duration_ms INTEGER NOT NULL,
    prev_hash   TEXT NOT NULL,
    hash        TEXT NOT NULL
);
CREATE INDEX audit_by_session ON audit (session_id, seq);
CREATE INDEX audit_by_tenant ON audit (tenant, seq);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
