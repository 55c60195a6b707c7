-- Money under faults (docs/tenants.md, "The delivery rule"), PostgreSQL
-- flavour; migrations/sqlite/00002_delivery.sql is the same schema.
--
-- A hold records the charge it is about to become and "delivering" before
-- the answer's last byte is written; a hold that expires while delivering
-- is moved to in_doubt (delivered or not: nobody knows) for an operator to
-- resolve. The ledger gains operator adjustments (kind 'adjust') and, per
-- row, the hold its charge released and the tenant's reservation after it,
-- so the overspend bound can be checked from the ledger alone.

-- +goose Up
ALTER TABLE holds ADD COLUMN delivering_us BIGINT;  -- NULL until the last write is about to happen
ALTER TABLE holds ADD COLUMN model TEXT NOT NULL DEFAULT '';
ALTER TABLE holds ADD COLUMN charge_micros BIGINT NOT NULL DEFAULT 0;
ALTER TABLE holds ADD COLUMN input_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE holds ADD COLUMN output_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE holds ADD COLUMN estimated BOOLEAN NOT NULL DEFAULT FALSE;

CREATE TABLE in_doubt (
    request_id     TEXT PRIMARY KEY,
    tenant         TEXT NOT NULL REFERENCES tenants (name),
    model          TEXT NOT NULL DEFAULT '',
    amount_micros  BIGINT NOT NULL CHECK (amount_micros >= 0), -- the charge it would be
    input_tokens   BIGINT NOT NULL DEFAULT 0,
    output_tokens  BIGINT NOT NULL DEFAULT 0,
    estimated      BOOLEAN NOT NULL DEFAULT FALSE,
    delivering_us  BIGINT NOT NULL, -- when the last write was about to happen
    recorded_us    BIGINT NOT NULL  -- when the hold expired (or a journal said so)
);
CREATE INDEX in_doubt_tenant ON in_doubt (tenant);

ALTER TABLE ledger ADD COLUMN held_micros BIGINT NOT NULL DEFAULT 0;     -- a charge's released hold
ALTER TABLE ledger ADD COLUMN reserved_micros BIGINT NOT NULL DEFAULT 0; -- the tenant's reservation after the row
ALTER TABLE ledger DROP CONSTRAINT ledger_kind_check;
ALTER TABLE ledger ADD CONSTRAINT ledger_kind_check CHECK (kind IN ('topup', 'charge', 'adjust'));

-- +goose Down
ALTER TABLE ledger DROP CONSTRAINT ledger_kind_check;
DELETE FROM ledger WHERE kind = 'adjust';
ALTER TABLE ledger ADD CONSTRAINT ledger_kind_check CHECK (kind IN ('topup', 'charge'));
ALTER TABLE ledger DROP COLUMN reserved_micros;
ALTER TABLE ledger DROP COLUMN held_micros;
DROP TABLE in_doubt;
ALTER TABLE holds DROP COLUMN estimated;
ALTER TABLE holds DROP COLUMN output_tokens;
ALTER TABLE holds DROP COLUMN input_tokens;
ALTER TABLE holds DROP COLUMN charge_micros;
ALTER TABLE holds DROP COLUMN model;
ALTER TABLE holds DROP COLUMN delivering_us;
