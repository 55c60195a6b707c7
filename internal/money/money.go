package money

import (
	"errors"
	"math/bits"
	"strconv"
	"strings"
)

// Micros is one currency unit in micro-units.
const Micros = 1_000_000

// MaxAmount bounds every amount this package produces or accepts: 10^9
// currency units, in micro-units. It is the store's bound too (beyond it
// SQLite would turn the integer into a float without an error).
const MaxAmount = 1_000_000_000 * Micros

// Errors of Parse.
var (
	ErrSyntax    = errors.New("not a decimal amount like 5, 0.25 or 1200.000001")
	ErrPrecision = errors.New("more than 6 decimal places (the smallest amount is one micro-unit, 0.000001)")
	ErrRange     = errors.New("amount too large (at most 1000000000)")
	ErrNegative  = errors.New("amount must not be negative")
)

// Parse reads a non-negative decimal amount in currency units ("5", "0.25",
// "1200.000001") into micro-units, exactly: digits, at most one '.', at
// most 6 decimal places, nothing else (no sign, exponent, spaces or
// separators). Trailing zeros beyond the sixth decimal are accepted
// ("0.1000000"), other digits there are ErrPrecision, never rounded away.
func Parse(s string) (int64, error) {
	if strings.HasPrefix(s, "-") {
		return 0, ErrNegative
	}
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || dot && frac == "" || !digits(whole) || !digits(frac) {
		return 0, ErrSyntax
	}
	if len(frac) > 6 {
		if strings.Trim(frac[6:], "0") != "" {
			return 0, ErrPrecision
		}
		frac = frac[:6]
	}
	whole = strings.TrimLeft(whole, "0")
	if len(whole) > 10 {
		return 0, ErrRange
	}
	var w int64
	if whole != "" {
		n, err := strconv.ParseInt(whole, 10, 64)
		if err != nil {
			return 0, ErrSyntax
		}
		w = n
	}
	var f int64
	if frac != "" {
		n, err := strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
		if err != nil {
			return 0, ErrSyntax
		}
		f = n
	}
	v := w*Micros + f
	if v > MaxAmount {
		return 0, ErrRange
	}
	return v, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Format writes micro-units as a decimal in currency units with exactly 6
// decimals ("-0.250000", "5.000000"): what Parse reads back.
func Format(micros int64) string {
	neg := micros < 0
	u := uint64(micros)
	if neg {
		u = -u
	}
	s := strconv.FormatUint(u/Micros, 10) + "." + pad6(u%Micros)
	if neg {
		return "-" + s
	}
	return s
}

func pad6(v uint64) string {
	s := strconv.FormatUint(v, 10)
	return strings.Repeat("0", 6-len(s)) + s
}

// Float is micro-units as a float in currency units, for metrics only:
// never for arithmetic on money.
func Float(micros int64) float64 { return float64(micros) / Micros }

// Price is a price per 1M tokens in micro-units (0.15 per 1M → 150000).
type Price struct {
	Input, Output int64
}

// MaxPrice bounds each side of a Price: 10^6 currency units per 1M tokens.
const MaxPrice = 1_000_000 * Micros

// IsZero reports a free model.
func (p Price) IsZero() bool { return p.Input == 0 && p.Output == 0 }

// Cost is what inputTokens and outputTokens cost at p, in micro-units,
// rounded up to the next micro-unit (never less than the price says), and
// capped at MaxAmount. Negative token counts count as 0.
func (p Price) Cost(inputTokens, outputTokens int64) int64 {
	in, out := uint64(max(inputTokens, 0)), uint64(max(outputTokens, 0))
	// 128-bit sum of the two products: tokens × price overflow int64 long
	// before a price or a usage is absurd on its own.
	h1, l1 := bits.Mul64(in, uint64(max(p.Input, 0)))
	h2, l2 := bits.Mul64(out, uint64(max(p.Output, 0)))
	lo, carry := bits.Add64(l1, l2, 0)
	hi, overflow := bits.Add64(h1, h2, carry)
	if overflow != 0 || hi >= 1_000_000 {
		return MaxAmount // the division below would overflow: far beyond MaxAmount anyway
	}
	q, r := bits.Div64(hi, lo, 1_000_000)
	if r > 0 {
		q++
	}
	if q > MaxAmount {
		return MaxAmount
	}
	return int64(q)
}

// FromFloat converts a float amount in currency units to micro-units,
// rounded to the nearest micro-unit and clamped to [0, MaxAmount]. Only for
// values that were floats already (prices written in exponent form in an
// older config); amounts a person types go through Parse.
func FromFloat(f float64) int64 {
	switch {
	case !(f > 0):
		return 0
	case f >= MaxAmount/Micros:
		return MaxAmount
	}
	return int64(f*Micros + 0.5)
}
