-- The wallets of DESIGN §9 and the status history of §10, SQLite flavour.
-- migrations/postgres/00001_wallets.sql is the same schema; the only
-- difference is the identity columns (INTEGER PRIMARY KEY, the rowid,
-- here). Times are BIGINT microseconds since the Unix epoch (UTC) in both:
-- one representation, exact, compared as integers. Money is BIGINT
-- micro-units.

-- +goose Up
CREATE TABLE tenants (
    name            TEXT PRIMARY KEY,
    currency        TEXT NOT NULL,
    balance_micros  BIGINT NOT NULL DEFAULT 0,
    -- the sum of the tenant's holds, kept with them in one transaction
    reserved_micros BIGINT NOT NULL DEFAULT 0 CHECK (reserved_micros >= 0),
    created_us      BIGINT NOT NULL
);

CREATE TABLE api_keys (
    key_id     TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL REFERENCES tenants (name),
    sha256     TEXT NOT NULL UNIQUE, -- hex of the key's SHA-256; the key itself is never stored
    created_us BIGINT NOT NULL,
    revoked_us BIGINT                -- NULL while the key is valid
);

CREATE TABLE holds (
    request_id    TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL REFERENCES tenants (name),
    amount_micros BIGINT NOT NULL CHECK (amount_micros >= 0),
    created_us    BIGINT NOT NULL,
    expires_us    BIGINT NOT NULL
);
CREATE INDEX holds_expires ON holds (expires_us);

CREATE TABLE ledger (
    id             INTEGER PRIMARY KEY,
    tenant         TEXT NOT NULL REFERENCES tenants (name),
    time_us        BIGINT NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('topup', 'charge')),
    request_id     TEXT UNIQUE,      -- a charge's request: at most one charge per request
    model          TEXT NOT NULL DEFAULT '',
    amount_micros  BIGINT NOT NULL,  -- top-ups positive, charges negative
    balance_micros BIGINT NOT NULL,  -- the tenant's balance after this row
    input_tokens   BIGINT NOT NULL DEFAULT 0,
    output_tokens  BIGINT NOT NULL DEFAULT 0,
    estimated      BOOLEAN NOT NULL DEFAULT FALSE,
    CHECK ((kind = 'charge') = (request_id IS NOT NULL))
);
CREATE INDEX ledger_tenant ON ledger (tenant, id);

CREATE TABLE audit (
    id      INTEGER PRIMARY KEY,
    time_us BIGINT NOT NULL,
    actor   TEXT NOT NULL,
    action  TEXT NOT NULL,
    subject TEXT NOT NULL,
    detail  TEXT NOT NULL DEFAULT ''
);

CREATE TABLE status_minutes (
    minute_us BIGINT NOT NULL,
    model     TEXT NOT NULL,
    ok        BIGINT NOT NULL,
    failed    BIGINT NOT NULL,
    PRIMARY KEY (minute_us, model)
);

CREATE TABLE status_days (
    day_us BIGINT NOT NULL,
    model  TEXT NOT NULL,
    ok     BIGINT NOT NULL,
    failed BIGINT NOT NULL,
    PRIMARY KEY (day_us, model)
);

-- +goose Down
DROP TABLE status_days;
DROP TABLE status_minutes;
DROP TABLE audit;
DROP TABLE ledger;
DROP TABLE holds;
DROP TABLE api_keys;
DROP TABLE tenants;
