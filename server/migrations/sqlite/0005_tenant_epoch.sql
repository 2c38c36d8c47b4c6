-- A tenant's epoch: random, new each time the tenant is created, kept when it is updated.
-- Tokens carry it, so a deleted tenant's tokens die with it and re-creating the tenant does not
-- revive them. Every insert writes one; existing tenants get a random one here (SQLite cannot
-- add a column with a non-constant default), so tokens minted before this have none and stop.
ALTER TABLE tenants ADD COLUMN epoch TEXT NOT NULL DEFAULT '';
UPDATE tenants SET epoch = lower(hex(randomblob(16)));
