package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hopgate/hopgate/dispatch/admin"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/wallet"
	"github.com/hopgate/hopgate/internal/money"
	"github.com/hopgate/hopgate/internal/store"
)

// cliActor names the CLI in the store's audit trail.
const cliActor = "cli"

const tenantsUsage = `usage (every command takes --config FILE, the gateway's config, for its store):
  hopgate tenants create NAME
  hopgate tenants list                    # JSON lines: {"tenant","currency","balance_micros","reserved_micros"}
  hopgate tenants show NAME               # {"tenant","currency","balance_micros","reserved_micros"}
  hopgate tenants topup NAME AMOUNT       # AMOUNT in currency units, e.g. 5 or 0.25 (exact, at most 6 decimals)
  hopgate tenants key issue NAME          # prints the new key once: {"key_id","key"}
  hopgate tenants key revoke KEY_ID       # running gateways stop accepting it within store.key_refresh
  hopgate tenants ledger NAME [--limit N] # JSON lines: in-doubt charges first, then the ledger, newest first
  hopgate tenants adjust NAME AMOUNT --reason TEXT      # AMOUNT may be negative (-0.000336); an audited ledger row
  hopgate tenants resolve REQUEST_ID charge|release --reason TEXT   # decide an in-doubt charge, audited
  hopgate tenants limits NAME [--model M] [--rpm N] [--tpm N]
                                          # sets the tenant's requests/tokens per minute (0 or omitted: unlimited;
                                          # both 0 removes); without --rpm/--tpm prints them: JSON lines {"tenant","model","rpm","tpm"}
`

// tenants runs `hopgate tenants …` against the configured store.
func tenants(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tenants", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, tenantsUsage) }
	path := fs.String("config", "", "config file (YAML) naming the store")
	limit := fs.Int("limit", 0, "ledger: at most this many rows (0: all)")
	reason := fs.String("reason", "", "adjust, resolve: why (recorded in the audit trail)")
	lf := limitFlags(fs)
	pos, err := interleaved(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) == 0 {
		fs.Usage()
		return 2
	}
	if pos[0] == "help" {
		fmt.Fprint(stdout, tenantsUsage)
		return 0
	}
	if *path == "" {
		fmt.Fprintln(stderr, "hopgate tenants: --config FILE is required (the store is the one the gateway uses)")
		return 2
	}
	cmd, want := pos[0], 0
	switch cmd {
	case "list":
		want = 1
	case "create", "show", "ledger", "limits":
		want = 2
	case "topup":
		want = 3
	case "adjust", "resolve":
		want = 3
		if *reason == "" {
			fmt.Fprintf(stderr, "hopgate tenants %s: --reason TEXT is required (it is recorded in the audit trail)\n", cmd)
			return 2
		}
	case "key":
		want = 3
		if len(pos) < 2 || pos[1] != "issue" && pos[1] != "revoke" {
			fmt.Fprintln(stderr, "hopgate tenants key: issue NAME | revoke KEY_ID")
			return 2
		}
	default:
		fmt.Fprintf(stderr, "hopgate tenants: unknown command %q\n", cmd)
		fs.Usage()
		return 2
	}
	if len(pos) != want {
		fmt.Fprintf(stderr, "hopgate tenants %s: wrong number of arguments\n", cmd)
		fs.Usage()
		return 2
	}
	st, err := openConfiguredStore(*path, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "hopgate tenants:", err)
		return 1
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := json.NewEncoder(stdout)
	run := func() error { return runTenants(ctx, st, pos, *limit, *reason, out) }
	if cmd == "limits" {
		run = func() error { return runLimits(ctx, st, pos[1], lf, out) }
	}
	if err := run(); err != nil {
		fmt.Fprintln(stderr, "hopgate tenants:", err)
		return 1
	}
	return 0
}

func runTenants(ctx context.Context, st *store.Store, pos []string, limit int, reason string, out *json.Encoder) error {
	switch pos[0] {
	case "create":
		t, err := st.CreateTenant(ctx, pos[1], cliActor)
		if err != nil {
			return err
		}
		return out.Encode(admin.ViewOf(t))
	case "list":
		ts, err := st.Tenants(ctx)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if err := out.Encode(admin.ViewOf(t)); err != nil {
				return err
			}
		}
		return nil
	case "show":
		t, err := st.Tenant(ctx, pos[1])
		if err != nil {
			return err
		}
		return out.Encode(admin.ViewOf(t))
	case "topup":
		micros, err := money.Parse(pos[2])
		if err != nil {
			return fmt.Errorf("AMOUNT %q: %w", pos[2], err)
		}
		if micros == 0 {
			return errors.New("AMOUNT must be greater than 0")
		}
		balance, err := st.TopUp(ctx, pos[1], micros, cliActor)
		if err != nil {
			return err
		}
		return out.Encode(struct {
			Tenant        string `json:"tenant"`
			AmountMicros  int64  `json:"amount_micros"`
			BalanceMicros int64  `json:"balance_micros"`
		}{pos[1], micros, balance})
	case "key":
		if pos[1] == "issue" {
			id, secret, err := wallet.IssueKey(ctx, st, pos[2], cliActor)
			if err != nil {
				return err
			}
			return out.Encode(struct {
				KeyID string `json:"key_id"`
				Key   string `json:"key"`
			}{id, secret})
		}
		if err := st.RevokeKey(ctx, pos[2], cliActor); err != nil {
			return err
		}
		return out.Encode(struct {
			KeyID   string `json:"key_id"`
			Revoked bool   `json:"revoked"`
		}{pos[2], true})
	case "adjust", "resolve":
		return runCorrection(ctx, st, pos, reason, out)
	case "ledger":
		rows, err := st.Ledger(ctx, pos[1], limit)
		if err != nil {
			return err
		}
		// In-doubt charges first: undecided, they need an operator.
		doubts, err := st.InDoubtCharges(ctx, pos[1])
		if err != nil {
			return err
		}
		for _, d := range doubts {
			if err := out.Encode(d); err != nil {
				return err
			}
		}
		for _, e := range rows {
			if err := out.Encode(e); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown command %q", pos[0])
}

// openConfiguredStore opens the store the config names. Only the store
// matters here: channel credentials that are not set in this shell do not
// stop an operator from topping up a wallet.
func openConfiguredStore(path string, stderr io.Writer) (*store.Store, error) {
	getenv := func(k string) (string, bool) {
		if v, ok := os.LookupEnv(k); ok && v != "" {
			return v, true
		}
		return "unset", true // not a store variable (checked below): irrelevant here
	}
	cfg, err := config.LoadEnv(path, getenv)
	if err != nil {
		reportConfigError(stderr, path, err)
		return nil, errors.New("the config file has errors")
	}
	if !cfg.Store.Enabled {
		return nil, fmt.Errorf("%s configures no store: add `store: {driver: sqlite}` (or postgres with dsn_env)", path)
	}
	if cfg.Store.Driver == config.StorePostgres {
		if v, ok := os.LookupEnv(cfg.Store.DSNEnv); !ok || v == "" {
			return nil, fmt.Errorf("environment variable %s (store.dsn_env) is not set", cfg.Store.DSNEnv)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return store.Open(ctx, store.Config{
		Driver: cfg.Store.Driver, Path: cfg.Store.Path, DSN: cfg.Store.DSN, Currency: cfg.Billing.Currency,
	})
}

// interleaved parses flags wherever they appear among the positional
// arguments ("show acme --config f.yaml" as well as "--config f.yaml show
// acme"); "--" ends the flags.
func interleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		// A negative amount (adjust NAME -0.5) is an argument, not a flag.
		for len(args) > 0 && negativeAmount(args[0]) {
			pos, args = append(pos, args[0]), args[1:]
		}
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
		if strings.HasPrefix(rest[0], "-") && rest[0] != "-" {
			return nil, fmt.Errorf("bad flag %q", rest[0])
		}
	}
}
