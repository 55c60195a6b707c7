package config

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hopgate/hopgate/internal/money"
)

// WriteChains prints what `hopgate check` shows: every channel with its
// resolved breaker, then every model in file order with its chain (cheapest
// first), its resolved policy and its fallbacks. The output is stable (no
// map iteration, no addresses) and never contains a credential — only the
// name of the variable it came from.
func (c *Config) WriteChains(w io.Writer) error {
	bw := bufio.NewWriter(w)
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)

	fmt.Fprintf(tw, "listen %s, admin %s, region %s, auth %s, keys %d\n\n",
		c.Listen, c.AdminListen, orDash(c.Region), c.Auth.Mode, len(c.Auth.Keys))

	wallets := "off"
	switch {
	case c.Wallets() && c.Store.Driver == StorePostgres:
		wallets = "on, postgres (env " + c.Store.DSNEnv + "), " + c.Billing.Currency + ", " + c.Billing.OnStoreError
	case c.Wallets():
		wallets = "on, sqlite " + c.Store.Path + ", " + c.Billing.Currency + ", " + c.Billing.OnStoreError
	}
	fmt.Fprintf(tw, "wallets %s\n\n", wallets)

	fmt.Fprintf(tw, "channels:\n")
	fmt.Fprintf(tw, "  ID\tPROVIDER\tREGION\tBASE URL\tCREDENTIAL\tPREFILL\tRETRIES\tBREAKER\n")
	for _, ch := range c.Channels {
		cred := ch.CredentialSource()
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n",
			ch.ID, ch.Provider, orDash(ch.Region), ch.BaseURL, cred, yesNo(ch.Prefill), ch.Retries, ch.Breaker)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	warned := false
	for _, ch := range c.Channels {
		if !ch.EarlyWarning.Enabled {
			continue
		}
		if !warned {
			fmt.Fprintf(tw, "\nearly warning (demote, never skip):\n")
			warned = true
		}
		fmt.Fprintf(tw, "  %s\t%s\n", ch.ID, ch.EarlyWarning)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	for _, m := range c.Models {
		fmt.Fprintf(tw, "\nmodel %s\n", m.Name)
		fmt.Fprintf(tw, "  operations:\t%s\n", strings.Join(m.Operations, ", "))
		fmt.Fprintf(tw, "  chain (cheapest first, USD per 1M tokens):\n")
		for i, e := range m.Chain {
			// prefill is the trailing text, not a cell: an empty last
			// cell would leave trailing spaces in the output.
			prefill := ""
			if e.Prefill {
				prefill = "\tprefill"
			}
			fmt.Fprintf(tw, "    %d.\t%s\t%s\t%s\tin %s + out %s = %s%s\n",
				i+1, e.Channel.ID, orDash(e.Channel.Region), e.UpstreamModel,
				price(e.Price.Input), price(e.Price.Output), price(e.Price.Total()), prefill)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(tw, "  list price:\tin %s + out %s %s per 1M tokens (what tenants pay)\n",
			decimal(m.ListPrice.Input), decimal(m.ListPrice.Output), c.Billing.Currency)
		p := m.Policy
		fmt.Fprintf(tw, "  policy:\tprofile %s\n", p.Profile)
		fmt.Fprintf(tw, "    header_timeout\t%s\n", dur(p.HeaderTimeout))
		fmt.Fprintf(tw, "    stream_gate\t%s, on_timeout %s\n", dur(p.GateTimeout), p.GateOnTimeout)
		fmt.Fprintf(tw, "    stream_idle_timeout\t%s\n", off(p.StreamIdleTimeout))
		fmt.Fprintf(tw, "    chain_deadline\t%s\n", off(p.ChainDeadline))
		fmt.Fprintf(tw, "    retry_after_max\t%s\n", dur(p.RetryAfterMax))
		fmt.Fprintf(tw, "    mid_stream\t%s\n", p.MidStream)
		if p.DegradedMode == DegradedMessage {
			fmt.Fprintf(tw, "    degraded_reply\tmessage %q\n", p.DegradedMessage)
		} else {
			fmt.Fprintf(tw, "    degraded_reply\terror\n")
		}
		fmt.Fprintf(tw, "  fallback_models:\t%s\n", orDash(strings.Join(m.FallbackModels, ", ")))
		fmt.Fprintf(tw, "  context_fallback:\t%s\n", orDash(m.ContextFallback))
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// String renders a breaker for `hopgate check` and logs, showing only the
// fields its mode uses.
func (b Breaker) String() string {
	if b.Mode == BreakerRate {
		return fmt.Sprintf("rate window=%s threshold=%s min_requests=%d cooldown=%s",
			dur(b.Window), strconv.FormatFloat(b.Threshold, 'f', -1, 64), b.MinRequests, dur(b.Cooldown))
	}
	return fmt.Sprintf("count window=%s failures=%d cooldown=%s", dur(b.Window), b.Failures, dur(b.Cooldown))
}

// String renders an early-warning policy for `hopgate check`.
func (e EarlyWarning) String() string {
	if !e.Enabled {
		return "off"
	}
	return fmt.Sprintf("baseline=%s window=%s latency_multiple=%s for=%s error_fraction=%s min_samples=%d cooldown=%s probation=%s ratelimit_utilization=%s",
		dur(e.Baseline), dur(e.Window), strconv.FormatFloat(e.LatencyMultiple, 'f', -1, 64), dur(e.For),
		strconv.FormatFloat(e.ErrorFraction, 'f', -1, 64), e.MinSamples, dur(e.Cooldown), dur(e.Probation),
		strconv.FormatFloat(e.RateLimitUtilization, 'f', -1, 64))
}

// decimal writes micro-units as a decimal without trailing zeros: 0.3, 1.2, 0.
func decimal(micros int64) string {
	s := money.Format(micros)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// dur prints durations in the units the design uses: whole minutes from 5m
// up ("5m"), whole seconds below ("60s", "240s"), anything else as Go
// prints it ("1.5s").
func dur(d time.Duration) string {
	switch {
	case d >= 5*time.Minute && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

func off(d time.Duration) string {
	if d == 0 {
		return "off"
	}
	return dur(d)
}

// price rounds to a millionth of a dollar first so that 0.15+0.60 prints as
// 0.75, not as a float artefact.
func price(v float64) string {
	return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// CredentialSource says how a channel's credential is found (never the
// credential itself): for `hopgate check` and the docs.
func (ch *Channel) CredentialSource() string {
	switch {
	case ch.Provider == ProviderBedrock:
		return "AWS default chain (SigV4)"
	case ch.Provider == ProviderVertex:
		return "Google ADC (OAuth)"
	case ch.EntraID:
		return "Entra ID (azidentity)"
	case ch.APIKeyEnv != "":
		return "env " + ch.APIKeyEnv
	}
	return "none"
}
