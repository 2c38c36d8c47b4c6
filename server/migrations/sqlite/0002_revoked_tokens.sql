-- Revoked token ids (jti): checked on every call through an in-memory cache refreshed often.
CREATE TABLE revoked_tokens (
    jti           TEXT PRIMARY KEY,
    revoked_at_ms INTEGER NOT NULL
);
