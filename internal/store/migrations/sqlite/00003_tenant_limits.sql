-- Tenant limits of DESIGN §16 (`hopgate tenants limits`), the same in both
-- dialects: requests and tokens per minute per tenant, for all its models
-- (model '') or one. 0 leaves that kind unlimited; a row with both 0 is
-- deleted rather than kept.

-- +goose Up
CREATE TABLE tenant_limits (
    tenant     TEXT NOT NULL REFERENCES tenants (name),
    model      TEXT NOT NULL DEFAULT '',
    rpm        BIGINT NOT NULL DEFAULT 0 CHECK (rpm >= 0),
    tpm        BIGINT NOT NULL DEFAULT 0 CHECK (tpm >= 0),
    updated_us BIGINT NOT NULL,
    PRIMARY KEY (tenant, model)
);

-- +goose Down
DROP TABLE tenant_limits;
