package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/store"
)

// limitsArgs are the flags of `hopgate tenants limits` (DESIGN §16).
type limitsArgs struct {
	model    *string
	rpm, tpm *int64
	fs       *flag.FlagSet
}

func limitFlags(fs *flag.FlagSet) limitsArgs {
	return limitsArgs{
		model: fs.String("model", "", "limits: the model the limits hold (default: all of the tenant's models)"),
		rpm:   fs.Int64("rpm", 0, "limits: requests per minute (0: unlimited)"),
		tpm:   fs.Int64("tpm", 0, "limits: tokens per minute (0: unlimited)"),
		fs:    fs,
	}
}

// runLimits sets a tenant's limits when --rpm or --tpm is given, and
// prints its stored limits otherwise. Running gateways apply a change
// within store.key_refresh; a limit of the config file for the same
// tenant and model wins over the stored one.
func runLimits(ctx context.Context, st *store.Store, tenant string, a limitsArgs, out *json.Encoder) error {
	set := false
	a.fs.Visit(func(f *flag.Flag) { set = set || f.Name == "rpm" || f.Name == "tpm" })
	if set {
		if *a.rpm < 0 || *a.tpm < 0 || *a.rpm > config.MaxRateLimit || *a.tpm > config.MaxRateLimit {
			return fmt.Errorf("--rpm and --tpm must be from 0 (unlimited) to %d", config.MaxRateLimit)
		}
		l := store.TenantLimit{Tenant: tenant, Model: *a.model, RPM: *a.rpm, TPM: *a.tpm}
		if err := st.SetLimit(ctx, l, cliActor); err != nil {
			return err
		}
		return out.Encode(l)
	}
	if _, err := st.Tenant(ctx, tenant); err != nil {
		return err
	}
	ls, err := st.Limits(ctx)
	if err != nil {
		return err
	}
	for _, l := range ls {
		if l.Tenant == tenant && (*a.model == "" || l.Model == *a.model) {
			if err := out.Encode(l); err != nil {
				return err
			}
		}
	}
	return nil
}
