package config

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hopgate/hopgate/internal/money"
)

// This file holds the keys of tenants and wallets (DESIGN §9): store,
// billing, admin_auth, auth.keys[].tenant, models[].price,
// models[].reserve_output_tokens and models[].realtime_hold (§15). The
// reference is in doc.go and docs/config.md.

// Store drivers (store.driver).
const (
	StoreSQLite   = "sqlite"
	StorePostgres = "postgres"
)

// What a charged request gets while the store is down (billing.on_store_error).
const (
	StoreErrorFailClosed = "fail_closed"
	StoreErrorFailOpen   = "fail_open"
)

// Defaults and bounds of the wallet keys.
const (
	DefaultStorePath  = "hopgate.db"
	DefaultKeyRefresh = 10 * time.Second
	MinKeyRefresh     = time.Second
	MaxKeyRefresh     = 5 * time.Minute
	DefaultCurrency   = "USD"
	DefaultHoldTTL    = 15 * time.Minute
	MinHoldTTL        = time.Minute
	MaxHoldTTL        = 24 * time.Hour
	// DefaultReserveOutputTokens is the output a reservation assumes for a
	// request that sets no max_tokens: a long answer, not a worst case.
	DefaultReserveOutputTokens = 4096
	MaxReserveOutputTokens     = 10_000_000
	// DefaultRealtimeHold is models[].realtime_hold's default, in
	// micro-units: one currency unit, what a tenant must cover to open a
	// realtime session.
	DefaultRealtimeHold = 1_000_000
	// DefaultJournalDir is billing.journal_dir's default, relative to the
	// directory of the config file.
	DefaultJournalDir = "hopgate-journal"
)

// Store says where tenants, wallets and the ledger live. Without a store
// key there is none, and wallets are off.
type Store struct {
	Enabled bool
	Driver  string // StoreSQLite | StorePostgres
	// Path is the SQLite file. Load makes a relative path relative to the
	// directory of the config file; Parse leaves it as written.
	Path   string
	DSNEnv string
	DSN    string // PostgreSQL connection string, read from DSNEnv; never printed
	// KeyRefresh is how often the gateway re-reads the keys issued at run
	// time: a key revoked anywhere stops working within it.
	KeyRefresh time.Duration
}

// Billing is how requests are charged.
type Billing struct {
	Currency string // ISO 4217 code of new wallets
	// OnStoreError: StoreErrorFailClosed answers 503 to a charged request
	// while the store is down; StoreErrorFailOpen serves it on credit.
	OnStoreError string
	// FailOpenCredit bounds, per tenant and replica, the reservations
	// served on credit while the store is down (micro-units).
	FailOpenCredit int64
	// HoldTTL is how long a reservation lives when nobody settles or
	// releases it (a replica that died).
	HoldTTL time.Duration
	// ReserveOutputTokens is the global default of
	// models[].reserve_output_tokens.
	ReserveOutputTokens int64
	// JournalDir is where the gateway keeps the charges the store could
	// not take yet (docs/tenants.md, the journal), read at start. Load
	// makes a relative path relative to the directory of the config file;
	// Parse leaves it as written.
	JournalDir string
}

// AdminAuth holds the keys allowed to change money and keys on the admin
// listener; none means only the CLI can.
type AdminAuth struct {
	Keys []Key
}

// Wallets reports whether requests are charged: a store is configured and
// clients authenticate with keys.
func (c *Config) Wallets() bool { return c.Store.Enabled && c.Auth.Mode == AuthKeys }

type rawWallet struct {
	store       val[bool] // the store key is present
	storeNode   *yaml.Node
	driver      val[string]
	path        val[string]
	dsnEnv      val[string]
	keyRefresh  val[time.Duration]
	billingNode *yaml.Node
	currency    val[string]
	onError     val[string]
	credit      val[int64]
	holdTTL     val[time.Duration]
	reserveOut  val[int64]
	journalDir  val[string]
	adminKeys   []rawKey
	adminKeysOK bool
}

func (p *parser) store(n *yaml.Node, w *rawWallet) {
	w.store = val[bool]{v: true, set: true, node: deref(n)}
	w.storeNode = deref(n)
	p.mapping(n, "store", fields{
		"driver":  func(_, v *yaml.Node) { w.driver = p.enum(v, "driver in store", StoreSQLite, StorePostgres) },
		"path":    func(_, v *yaml.Node) { w.path = p.nonEmpty(v, "path in store") },
		"dsn_env": func(_, v *yaml.Node) { w.dsnEnv = p.envName(v, "dsn_env in store") },
		"key_refresh": func(_, v *yaml.Node) {
			w.keyRefresh = p.durationIn(v, "key_refresh in store", MinKeyRefresh, MaxKeyRefresh)
		},
	})
}

func (p *parser) billing(n *yaml.Node, w *rawWallet) {
	w.billingNode = deref(n)
	p.mapping(n, "billing", fields{
		"currency": func(_, v *yaml.Node) {
			w.currency = p.str(v, "currency in billing")
			if w.currency.set && !validCurrency(w.currency.v) {
				p.errorf(w.currency.node, "currency in billing must be a three-letter ISO 4217 code in capitals, like USD or EUR, not %q", w.currency.v)
				w.currency = val[string]{}
			}
		},
		"on_store_error": func(_, v *yaml.Node) {
			w.onError = p.enum(v, "on_store_error in billing", StoreErrorFailClosed, StoreErrorFailOpen)
		},
		"fail_open_credit": func(_, v *yaml.Node) { w.credit = p.amount(v, "fail_open_credit in billing") },
		"hold_ttl":         func(_, v *yaml.Node) { w.holdTTL = p.durationIn(v, "hold_ttl in billing", MinHoldTTL, MaxHoldTTL) },
		"reserve_output_tokens": func(_, v *yaml.Node) {
			w.reserveOut = p.tokens(v, "reserve_output_tokens in billing")
		},
		"journal_dir": func(_, v *yaml.Node) { w.journalDir = p.nonEmpty(v, "journal_dir in billing") },
	})
}

func (p *parser) adminAuth(n *yaml.Node, w *rawWallet) {
	p.mapping(n, "admin_auth", fields{
		"keys": func(_, v *yaml.Node) {
			w.adminKeysOK = true
			p.sequence(v, "keys in admin_auth", func(i int, item *yaml.Node) {
				k := rawKey{node: deref(item)}
				ctx := fmt.Sprintf("admin key %d", i+1)
				if id, ok := peek(item, "id"); ok {
					ctx = fmt.Sprintf("admin key %q", id)
				}
				if p.mapping(item, ctx, fields{
					"id":     func(_, v *yaml.Node) { k.id = p.str(v, in("id", ctx)) },
					"sha256": func(_, v *yaml.Node) { k.sha256 = p.str(v, in("sha256", ctx)) },
				}) {
					w.adminKeys = append(w.adminKeys, k)
				}
			})
		},
	})
}

// modelPrice reads models[].price: the list price tenants pay.
func (p *parser) modelPrice(n *yaml.Node, ctx string, m *rawModel) {
	m.priceSet = true
	m.priceNode = deref(n)
	pctx := in("price", ctx)
	p.mapping(n, pctx, fields{
		"input":  func(_, v *yaml.Node) { m.priceIn = p.pricePerM(v, in("input", pctx)) },
		"output": func(_, v *yaml.Node) { m.priceOut = p.pricePerM(v, in("output", pctx)) },
	})
}

// nonEmpty reads a string that must not be empty.
func (p *parser) nonEmpty(n *yaml.Node, what string) val[string] {
	v := p.str(n, what)
	if v.set && v.v == "" {
		p.errorf(v.node, "%s must not be empty", what)
		return val[string]{}
	}
	return v
}

// durationIn reads a duration within [lo, hi].
func (p *parser) durationIn(n *yaml.Node, what string, lo, hi time.Duration) val[time.Duration] {
	v := p.duration(n, what, true)
	if v.set && (v.v < lo || v.v > hi) {
		p.errorf(v.node, "%s must be between %s and %s, not %s", what, bound(lo), bound(hi), v.node.Value)
		return val[time.Duration]{}
	}
	return v
}

// tokens reads a token count in [0, MaxReserveOutputTokens].
func (p *parser) tokens(n *yaml.Node, what string) val[int64] {
	v := p.integer(n, what, 0)
	if v.set && v.v > MaxReserveOutputTokens {
		p.errorf(v.node, "%s must be at most %d, not %d", what, MaxReserveOutputTokens, v.v)
		return val[int64]{}
	}
	return v
}

// amount reads money in currency units (5, 0.25, "0.25") exactly into
// micro-units: the text of the scalar is parsed, never a float.
func (p *parser) amount(n *yaml.Node, what string) val[int64] {
	s := p.scalar(n, what, "an amount")
	if s == nil {
		return val[int64]{}
	}
	if s.Tag != "!!int" && s.Tag != "!!float" && s.Tag != "!!str" {
		p.errorf(s, "%s must be an amount like 5 or 0.25, not %s", what, describe(s))
		return val[int64]{}
	}
	v, err := money.Parse(s.Value)
	if err != nil {
		p.errorf(s, "%s is not a valid amount (%q): %v", what, s.Value, err)
		return val[int64]{}
	}
	return val[int64]{v: v, set: true, node: s}
}

// pricePerM reads one side of a list price: currency units per 1M tokens,
// exactly, at most money.MaxPrice.
func (p *parser) pricePerM(n *yaml.Node, what string) val[int64] {
	v := p.amount(n, what)
	if v.set && v.v > money.MaxPrice {
		p.errorf(v.node, "%s must be at most %d per 1M tokens", what, money.MaxPrice/money.Micros)
		return val[int64]{}
	}
	return v
}

// bound writes a limit the way an operator would: 24h, 1m, 5m, 1s.
func bound(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return dur(d)
}

func validCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if c[i] < 'A' || c[i] > 'Z' {
			return false
		}
	}
	return true
}

// validTenant mirrors the store's rule for names: not empty, at most 200
// bytes, no control characters.
func validTenant(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// entryPriceMicros is a chain entry's price in micro-units: exact when the
// file wrote decimals, rounded to the micro-unit for any other number form.
func entryPriceMicros(re *rawEntry) money.Price {
	side := func(v val[float64]) int64 {
		if !v.set {
			return 0
		}
		if m, err := money.Parse(v.node.Value); err == nil {
			return min(m, money.MaxPrice)
		}
		return min(money.FromFloat(v.v), money.MaxPrice)
	}
	return money.Price{Input: side(re.input), Output: side(re.output)}
}

// resolveWallet resolves store, billing, admin_auth and the per-model
// wallet keys, once models are resolved.
func (p *parser) resolveWallet(c *Config, f *rawFile) {
	w := &f.wallet
	c.Store = Store{
		Enabled:    w.store.set,
		Driver:     w.driver.or(StoreSQLite),
		Path:       w.path.v,
		DSNEnv:     w.dsnEnv.v,
		KeyRefresh: w.keyRefresh.or(DefaultKeyRefresh),
	}
	if c.Store.Enabled {
		switch c.Store.Driver {
		case StoreSQLite:
			if w.dsnEnv.set {
				p.errorf(w.dsnEnv.node, "dsn_env in store is for driver postgres; driver sqlite uses path")
			}
			if c.Store.Path == "" {
				c.Store.Path = DefaultStorePath
			}
		case StorePostgres:
			if w.path.set {
				p.errorf(w.path.node, "path in store is for driver sqlite; driver postgres reads its DSN from the variable named by dsn_env")
			}
			switch {
			case w.dsnEnv.set:
				c.Store.DSN = p.lookupEnv(w.dsnEnv, "dsn_env in store")
			case !hasKey(w.storeNode, "dsn_env"):
				p.errorf(w.driver.line(w.storeNode), "store driver postgres needs dsn_env: the name of the environment variable holding the connection string")
			}
		}
	}

	c.Billing = Billing{
		Currency:            w.currency.or(DefaultCurrency),
		OnStoreError:        w.onError.or(StoreErrorFailClosed),
		FailOpenCredit:      w.credit.v,
		HoldTTL:             w.holdTTL.or(DefaultHoldTTL),
		ReserveOutputTokens: w.reserveOut.or(DefaultReserveOutputTokens),
		JournalDir:          w.journalDir.v,
	}
	switch {
	case c.Billing.OnStoreError == StoreErrorFailOpen && w.credit.set && w.credit.v == 0:
		p.errorf(w.credit.node, "fail_open_credit in billing must be greater than 0 with on_store_error fail_open")
	case c.Billing.OnStoreError == StoreErrorFailOpen && !w.credit.set && !hasKey(w.billingNode, "fail_open_credit"):
		p.errorf(w.onError.node, "on_store_error fail_open in billing needs fail_open_credit > 0: the most one tenant may spend on one replica while the store is down")
	case c.Billing.OnStoreError == StoreErrorFailClosed && w.credit.set && w.credit.v > 0:
		p.errorf(w.credit.node, "fail_open_credit in billing has no effect unless on_store_error is fail_open")
	}

	p.resolveAdminAuth(c, w)

	for _, rm := range f.models {
		m := c.models[rm.name.v]
		if m == nil || m.Line != rm.node.Line {
			continue // not resolved (reported already)
		}
		m.ReserveOutputTokens = rm.reserveOut.or(c.Billing.ReserveOutputTokens)
		m.RealtimeHold = rm.realtimeHold.or(DefaultRealtimeHold)
		if len(m.Chain) > 0 {
			m.ListPrice = m.Chain[0].PriceMicros
		}
		if rm.priceSet {
			if rm.priceIn.set {
				m.ListPrice.Input = rm.priceIn.v
			}
			if rm.priceOut.set {
				m.ListPrice.Output = rm.priceOut.v
			}
			if !rm.priceIn.set && !rm.priceOut.set && !isNull(rm.priceNode) && rm.priceNode.Kind == yaml.MappingNode &&
				len(rm.priceNode.Content) == 0 {
				p.errorf(rm.priceNode, "price of model %q is empty: set input and output (per 1M tokens), or omit it for the cheapest chain entry's price", m.Name)
			}
		}
	}
}

func (p *parser) resolveAdminAuth(c *Config, w *rawWallet) {
	ids := map[string]int{}
	hashes := map[[32]byte]string{}
	for _, k := range c.Auth.Keys {
		hashes[k.SHA256] = "client key " + k.ID
	}
	for i, rk := range w.adminKeys {
		ctx := fmt.Sprintf("admin key %d", i+1)
		if !rk.id.set || rk.id.v == "" {
			if rk.id.set || !hasKey(rk.node, "id") {
				p.errorf(rk.id.line(rk.node), "%s has no id", ctx)
			}
			continue
		}
		ctx = fmt.Sprintf("admin key %q", rk.id.v)
		if !validTenant(rk.id.v) {
			p.errorf(rk.id.node, "id of %s must be at most 200 bytes without control characters", ctx)
			continue
		}
		if line, dup := ids[rk.id.v]; dup {
			p.errorf(rk.id.node, "duplicate admin key id %q (first at line %d)", rk.id.v, line)
			continue
		}
		ids[rk.id.v] = rk.id.node.Line
		if !rk.sha256.set {
			if !hasKey(rk.node, "sha256") {
				p.errorf(rk.node, "%s has no sha256", ctx)
			}
			continue
		}
		var sum [32]byte
		if b, err := hex.DecodeString(rk.sha256.v); err != nil || len(b) != len(sum) {
			p.errorf(rk.sha256.node, "sha256 of %s must be 64 hex characters (the sha256 of the admin bearer token)", ctx)
			continue
		} else {
			copy(sum[:], b)
		}
		if other, dup := hashes[sum]; dup {
			// One secret must not be both a client key and an admin key:
			// a client could then top up its own wallet.
			p.errorf(rk.sha256.node, "%s has the same sha256 as %s", ctx, other)
			continue
		}
		hashes[sum] = "admin key " + rk.id.v
		c.AdminAuth.Keys = append(c.AdminAuth.Keys, Key{ID: rk.id.v, SHA256: sum})
	}
}
