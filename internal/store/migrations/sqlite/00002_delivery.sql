-- Money under faults (docs/tenants.md, "The delivery rule"), SQLite
-- flavour; migrations/postgres/00002_delivery.sql is the same schema (see
-- its header). SQLite cannot change a CHECK constraint in place, so the
-- ledger is rebuilt with the new kind 'adjust' and its two new columns.

-- +goose Up
ALTER TABLE holds ADD COLUMN delivering_us BIGINT;
ALTER TABLE holds ADD COLUMN model TEXT NOT NULL DEFAULT '';
ALTER TABLE holds ADD COLUMN charge_micros BIGINT NOT NULL DEFAULT 0;
ALTER TABLE holds ADD COLUMN input_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE holds ADD COLUMN output_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE holds ADD COLUMN estimated BOOLEAN NOT NULL DEFAULT FALSE;

CREATE TABLE in_doubt (
    request_id     TEXT PRIMARY KEY,
    tenant         TEXT NOT NULL REFERENCES tenants (name),
    model          TEXT NOT NULL DEFAULT '',
    amount_micros  BIGINT NOT NULL CHECK (amount_micros >= 0),
    input_tokens   BIGINT NOT NULL DEFAULT 0,
    output_tokens  BIGINT NOT NULL DEFAULT 0,
    estimated      BOOLEAN NOT NULL DEFAULT FALSE,
    delivering_us  BIGINT NOT NULL,
    recorded_us    BIGINT NOT NULL
);
CREATE INDEX in_doubt_tenant ON in_doubt (tenant);

CREATE TABLE ledger_new (
    id              INTEGER PRIMARY KEY,
    tenant          TEXT NOT NULL REFERENCES tenants (name),
    time_us         BIGINT NOT NULL,
    kind            TEXT NOT NULL CHECK (kind IN ('topup', 'charge', 'adjust')),
    request_id      TEXT UNIQUE,
    model           TEXT NOT NULL DEFAULT '',
    amount_micros   BIGINT NOT NULL,
    balance_micros  BIGINT NOT NULL,
    input_tokens    BIGINT NOT NULL DEFAULT 0,
    output_tokens   BIGINT NOT NULL DEFAULT 0,
    estimated       BOOLEAN NOT NULL DEFAULT FALSE,
    held_micros     BIGINT NOT NULL DEFAULT 0,
    reserved_micros BIGINT NOT NULL DEFAULT 0,
    CHECK ((kind = 'charge') = (request_id IS NOT NULL))
);
INSERT INTO ledger_new (id, tenant, time_us, kind, request_id, model, amount_micros, balance_micros,
                        input_tokens, output_tokens, estimated)
    SELECT id, tenant, time_us, kind, request_id, model, amount_micros, balance_micros,
           input_tokens, output_tokens, estimated FROM ledger;
DROP TABLE ledger;
ALTER TABLE ledger_new RENAME TO ledger;
CREATE INDEX ledger_tenant ON ledger (tenant, id);

-- +goose Down
CREATE TABLE ledger_old (
    id             INTEGER PRIMARY KEY,
    tenant         TEXT NOT NULL REFERENCES tenants (name),
    time_us        BIGINT NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('topup', 'charge')),
    request_id     TEXT UNIQUE,
    model          TEXT NOT NULL DEFAULT '',
    amount_micros  BIGINT NOT NULL,
    balance_micros BIGINT NOT NULL,
    input_tokens   BIGINT NOT NULL DEFAULT 0,
    output_tokens  BIGINT NOT NULL DEFAULT 0,
    estimated      BOOLEAN NOT NULL DEFAULT FALSE,
    CHECK ((kind = 'charge') = (request_id IS NOT NULL))
);
INSERT INTO ledger_old SELECT id, tenant, time_us, kind, request_id, model, amount_micros, balance_micros,
       input_tokens, output_tokens, estimated FROM ledger WHERE kind <> 'adjust';
DROP TABLE ledger;
ALTER TABLE ledger_old RENAME TO ledger;
CREATE INDEX ledger_tenant ON ledger (tenant, id);
DROP TABLE in_doubt;
ALTER TABLE holds DROP COLUMN estimated;
ALTER TABLE holds DROP COLUMN output_tokens;
ALTER TABLE holds DROP COLUMN input_tokens;
ALTER TABLE holds DROP COLUMN charge_micros;
ALTER TABLE holds DROP COLUMN model;
ALTER TABLE holds DROP COLUMN delivering_us;
