-- How a tenant's sessions are kept apart from each other: 'process' (a Chromium each) or
-- 'context' (a browser context each, in a Chromium the tenant's sessions share).
ALTER TABLE tenants ADD COLUMN isolation TEXT NOT NULL DEFAULT 'process';
