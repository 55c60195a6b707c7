package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/wallet"
	"github.com/hopgate/hopgate/internal/money"
	"github.com/hopgate/hopgate/internal/store"
)

// TenantStore is what /admin/tenants needs of the store (*store.Store).
type TenantStore interface {
	wallet.KeyAdder
	Tenants(ctx context.Context) ([]store.Tenant, error)
	Tenant(ctx context.Context, name string) (store.Tenant, error)
	CreateTenant(ctx context.Context, name, actor string) (store.Tenant, error)
	TopUp(ctx context.Context, tenant string, amountMicros int64, actor string) (int64, error)
	RevokeKey(ctx context.Context, keyID, actor string) error
	Keys(ctx context.Context) ([]store.KeyRecord, error)
	Ledger(ctx context.Context, tenant string, limit int) ([]store.LedgerEntry, error)
	InDoubtCharges(ctx context.Context, tenant string) ([]store.InDoubt, error)
	ResolveInDoubt(ctx context.Context, requestID string, how store.Resolution, actor, reason string) (store.InDoubt, *store.LedgerEntry, error)
	Adjust(ctx context.Context, tenant string, amountMicros int64, actor, reason string) (int64, error)
}

var _ TenantStore = (*store.Store)(nil)

// Tenants serves /admin/tenants: wallets and keys over JSON (DESIGN §9).
type Tenants struct {
	Store TenantStore
	// Refresh, when set, is called after a key was issued or revoked so
	// this replica knows it at once (others within store.key_refresh).
	Refresh func(context.Context)
	// Limits, when set, returns the tenant's rate limits in force: the
	// config's and the stored ones (limits.go).
	Limits func(ctx context.Context, tenant string) []LimitView
}

// Bounds of the ledger endpoint's limit parameter.
const (
	defaultLedgerLimit = 100
	maxLedgerLimit     = 10000
)

// tenantRoutes registers /admin/tenants. Reads follow the admin guard
// (admin.token_env, or an admin_auth key); everything that changes money
// or keys needs an admin_auth key, and answers 403 when none is
// configured: then only the CLI changes wallets. Every change names its
// actor (the admin key id) in the store's audit trail.
func (s *Server) tenantRoutes(mux *http.ServeMux) {
	read := func(h func(http.ResponseWriter, *http.Request, *Tenants)) http.Handler {
		return s.tenantsAuth(false, func(w http.ResponseWriter, r *http.Request, t *Tenants, _ string) { h(w, r, t) })
	}
	write := func(h func(http.ResponseWriter, *http.Request, *Tenants, string)) http.Handler {
		return s.tenantsAuth(true, h)
	}
	mux.Handle("GET /admin/tenants", read(listTenants))
	mux.Handle("GET /admin/tenants/{name}", read(showTenant))
	mux.Handle("GET /admin/tenants/{name}/ledger", read(tenantLedger))
	mux.Handle("GET /admin/tenants/{name}/keys", read(tenantKeys))
	mux.Handle("GET /admin/tenants/{name}/in-doubt", read(tenantInDoubt))
	mux.Handle("POST /admin/tenants", write(createTenant))
	mux.Handle("POST /admin/tenants/{name}/topup", write(topUp))
	mux.Handle("POST /admin/tenants/{name}/adjust", write(adjust))
	mux.Handle("POST /admin/tenants/{name}/in-doubt/{request_id}", write(resolveInDoubt))
	mux.Handle("POST /admin/tenants/{name}/keys", write(issueKey))
	mux.Handle("DELETE /admin/tenants/{name}/keys/{key_id}", write(revokeKey))
}

// tenantsAuth authenticates a /admin/tenants request and hands it the
// actor (the admin key's id; "" for reads without one).
func (s *Server) tenantsAuth(write bool, h func(http.ResponseWriter, *http.Request, *Tenants, string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cfg := s.Config()
		t := s.Tenants
		if t == nil || t.Store == nil {
			jsonError(w, http.StatusNotFound, "no store is configured: add store to the config file")
			return
		}
		actor, hasKey := adminKey(cfg, r)
		switch {
		case write && len(cfg.AdminAuth.Keys) == 0:
			jsonError(w, http.StatusForbidden, "no admin_auth keys are configured: only the CLI (hopgate tenants) can change wallets and keys")
			return
		case write && !hasKey:
			w.Header().Set("WWW-Authenticate", `Bearer realm="hopgate-admin"`)
			jsonError(w, http.StatusUnauthorized, "an admin_auth key is required: send Authorization: Bearer <admin key>")
			return
		case !write && !hasKey && cfg.Admin.BearerToken != "" && !adminToken(cfg, r):
			w.Header().Set("WWW-Authenticate", `Bearer realm="hopgate-admin"`)
			jsonError(w, http.StatusUnauthorized, "admin token required")
			return
		}
		h(w, r, t, actor)
	})
}

// adminKey returns the id of the admin_auth key presented, comparing with
// every key in constant time.
func adminKey(cfg *config.Config, r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	sum := sha256Sum(strings.TrimSpace(h[len(prefix):]))
	match := -1
	for i := range cfg.AdminAuth.Keys {
		if subtle.ConstantTimeCompare(sum[:], cfg.AdminAuth.Keys[i].SHA256[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return "", false
	}
	return cfg.AdminAuth.Keys[match].ID, true
}

// adminToken reports whether the request carries admin.token_env's token.
func adminToken(cfg *config.Config, r *http.Request) bool {
	got := strings.TrimSpace(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	a, b := sha256Sum(got), sha256Sum(cfg.Admin.BearerToken)
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// TenantView is a wallet as the admin API and `hopgate tenants show`
// print it.
type TenantView struct {
	Tenant         string `json:"tenant"`
	Currency       string `json:"currency"`
	BalanceMicros  int64  `json:"balance_micros"`
	ReservedMicros int64  `json:"reserved_micros"`
	// InDoubt and InDoubtMicros: the tenant's in-doubt charges (count and
	// sum), shown while there are any (docs/tenants.md, the delivery rule).
	InDoubt       int64 `json:"in_doubt,omitempty"`
	InDoubtMicros int64 `json:"in_doubt_micros,omitempty"`
	// Limits are the tenant's rate limits in force (limits.go).
	Limits []LimitView `json:"limits,omitempty"`
}

// ViewOf is t's TenantView.
func ViewOf(t store.Tenant) TenantView {
	return TenantView{Tenant: t.Name, Currency: t.Currency, BalanceMicros: t.BalanceMicros, ReservedMicros: t.ReservedMicros,
		InDoubt: t.InDoubt, InDoubtMicros: t.InDoubtMicros}
}

// KeyView is a key without its hash.
type KeyView struct {
	KeyID     string    `json:"key_id"`
	Tenant    string    `json:"tenant"`
	CreatedAt time.Time `json:"created_at"`
	Revoked   bool      `json:"revoked"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

func listTenants(w http.ResponseWriter, r *http.Request, t *Tenants) {
	ts, err := t.Store.Tenants(r.Context())
	if err != nil {
		storeError(w, err)
		return
	}
	out := make([]TenantView, 0, len(ts))
	for _, tn := range ts {
		out = append(out, t.withLimits(r.Context(), ViewOf(tn)))
	}
	writeJSON(w, out)
}

func showTenant(w http.ResponseWriter, r *http.Request, t *Tenants) {
	tn, err := t.Store.Tenant(r.Context(), r.PathValue("name"))
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, t.withLimits(r.Context(), ViewOf(tn)))
}

func tenantLedger(w http.ResponseWriter, r *http.Request, t *Tenants) {
	limit := defaultLedgerLimit
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxLedgerLimit {
			jsonError(w, http.StatusBadRequest, "limit must be an integer from 1 to "+strconv.Itoa(maxLedgerLimit))
			return
		}
		limit = n
	}
	rows, err := t.Store.Ledger(r.Context(), r.PathValue("name"), limit)
	if err != nil {
		storeError(w, err)
		return
	}
	if rows == nil {
		rows = []store.LedgerEntry{}
	}
	writeJSON(w, rows)
}

func tenantKeys(w http.ResponseWriter, r *http.Request, t *Tenants) {
	name := r.PathValue("name")
	if _, err := t.Store.Tenant(r.Context(), name); err != nil {
		storeError(w, err)
		return
	}
	keys, err := t.Store.Keys(r.Context())
	if err != nil {
		storeError(w, err)
		return
	}
	out := []KeyView{}
	for _, k := range keys {
		if k.Tenant == name {
			out = append(out, KeyView{KeyID: k.KeyID, Tenant: k.Tenant, CreatedAt: k.CreatedAt, Revoked: k.Revoked, RevokedAt: k.RevokedAt})
		}
	}
	writeJSON(w, out)
}

// maxAdminBody bounds a request body of the admin API.
const maxAdminBody = 4 << 10

// readBody decodes a small JSON object into v; numbers stay text, so an
// amount is parsed exactly.
func readBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		jsonError(w, http.StatusBadRequest, "the body must be a JSON object: "+err.Error())
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		jsonError(w, http.StatusBadRequest, "the body must be one JSON object")
		return false
	}
	return true
}

func createTenant(w http.ResponseWriter, r *http.Request, t *Tenants, actor string) {
	var body struct {
		Tenant string `json:"tenant"`
	}
	if !readBody(w, r, &body) {
		return
	}
	tn, err := t.Store.CreateTenant(r.Context(), body.Tenant, actor)
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSONStatus(w, http.StatusCreated, ViewOf(tn))
}

func topUp(w http.ResponseWriter, r *http.Request, t *Tenants, actor string) {
	var body struct {
		// Amount in currency units, a JSON string ("0.25") or number
		// (0.25), read exactly.
		Amount json.Number `json:"amount"`
	}
	if !readBody(w, r, &body) {
		return
	}
	micros, err := money.Parse(strings.Trim(string(body.Amount), `"`))
	if err != nil || micros == 0 {
		msg := "amount must be a positive amount in currency units, like 5 or \"0.25\""
		if err != nil {
			msg += ": " + err.Error()
		}
		jsonError(w, http.StatusBadRequest, msg)
		return
	}
	name := r.PathValue("name")
	balance, err := t.Store.TopUp(r.Context(), name, micros, actor)
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, struct {
		Tenant        string `json:"tenant"`
		AmountMicros  int64  `json:"amount_micros"`
		BalanceMicros int64  `json:"balance_micros"`
	}{name, micros, balance})
}

func issueKey(w http.ResponseWriter, r *http.Request, t *Tenants, actor string) {
	name := r.PathValue("name")
	id, secret, err := wallet.IssueKey(r.Context(), t.Store, name, actor)
	if err != nil {
		storeError(w, err)
		return
	}
	if t.Refresh != nil {
		t.Refresh(r.Context())
	}
	w.Header().Set("Cache-Control", "no-store") // the secret is shown once
	writeJSONStatus(w, http.StatusCreated, struct {
		KeyID string `json:"key_id"`
		Key   string `json:"key"`
	}{id, secret})
}

func revokeKey(w http.ResponseWriter, r *http.Request, t *Tenants, actor string) {
	name, id := r.PathValue("name"), r.PathValue("key_id")
	keys, err := t.Store.Keys(r.Context())
	if err != nil {
		storeError(w, err)
		return
	}
	found := false
	for _, k := range keys {
		found = found || k.KeyID == id && k.Tenant == name
	}
	if !found {
		jsonError(w, http.StatusNotFound, "tenant "+strconv.Quote(name)+" has no key "+strconv.Quote(id))
		return
	}
	if err := t.Store.RevokeKey(r.Context(), id, actor); err != nil {
		storeError(w, err)
		return
	}
	if t.Refresh != nil {
		t.Refresh(r.Context())
	}
	writeJSON(w, struct {
		KeyID   string `json:"key_id"`
		Revoked bool   `json:"revoked"`
	}{id, true})
}

// storeError answers a store failure with its status.
func storeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		jsonError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, store.ErrExists):
		jsonError(w, http.StatusConflict, err.Error())
	case errors.Is(err, store.ErrInvalid):
		jsonError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, store.ErrUnavailable):
		w.Header().Set("Retry-After", "5")
		jsonError(w, http.StatusServiceUnavailable, "the store is unavailable; retry shortly")
	default:
		jsonError(w, http.StatusInternalServerError, "store error")
	}
}

// jsonError writes {"error": msg}. encoding/json escapes <, > and &, so a
// name echoed in a message cannot become markup even if the answer is
// rendered as HTML.
func jsonError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{msg})
}

// writeJSONStatus is writeJSON with a status other than 200.
func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func sha256Sum(s string) [32]byte { return sha256.Sum256([]byte(s)) }
