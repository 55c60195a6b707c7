package money

import (
	"errors"
	"math"
	"math/big"
	"testing"
)

// Why: amounts typed at the CLI and prices in the config become integers
// exactly, or are refused; a float would turn 0.1 into 0.099999.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  error
	}{
		{"5", 5_000_000, nil},
		{"0.25", 250_000, nil},
		{"0.1", 100_000, nil},
		{"1200.000001", 1_200_000_001, nil},
		{"0.1000000", 100_000, nil},
		{"007.5", 7_500_000, nil},
		{"0", 0, nil},
		{"1000000000", MaxAmount, nil},
		{"1000000000.000001", 0, ErrRange},
		{"99999999999", 0, ErrRange},
		{"0.0000001", 0, ErrPrecision},
		{"-1", 0, ErrNegative},
		{"", 0, ErrSyntax},
		{".5", 0, ErrSyntax},
		{"5.", 0, ErrSyntax},
		{"1e3", 0, ErrSyntax},
		{"+1", 0, ErrSyntax},
		{" 1", 0, ErrSyntax},
		{"1,5", 0, ErrSyntax},
		{"1.2.3", 0, ErrSyntax},
		{"０", 0, ErrSyntax}, // a full-width digit
	} {
		got, err := Parse(tc.in)
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// Why: Format is what the CLI and the admin API print; Parse must read it
// back to the same micro-units.
func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		in   int64
		want string
	}{
		{0, "0.000000"}, {1, "0.000001"}, {-250_000, "-0.250000"}, {5_000_000, "5.000000"},
		{math.MinInt64, "-9223372036854.775808"},
	} {
		if got := Format(tc.in); got != tc.want {
			t.Errorf("Format(%d) = %q, want %q", tc.in, got, tc.want)
		}
		if tc.in >= 0 {
			if back, err := Parse(Format(tc.in)); err != nil || back != tc.in {
				t.Errorf("Parse(Format(%d)) = %d, %v", tc.in, back, err)
			}
		}
	}
}

// Why: the charge of a request is rounded up once, and huge usages saturate
// instead of wrapping around to a small or negative charge.
func TestCost(t *testing.T) {
	p := Price{Input: 300_000, Output: 1_200_000} // 0.30 / 1.20 per 1M tokens
	for _, tc := range []struct {
		in, out int64
		want    int64
	}{
		{0, 0, 0},
		{1, 0, 1},               // 0.3 micro-units, rounded up
		{10, 20, 27},            // 3 + 24
		{1_000_000, 0, 300_000}, // exactly the price
		{3, 1, 3},               // 0.9 + 1.2 = 2.1 → 3
		{-5, 10, 12},            // negative counts as 0
		{math.MaxInt64, math.MaxInt64, MaxAmount},
	} {
		if got := p.Cost(tc.in, tc.out); got != tc.want {
			t.Errorf("Cost(%d, %d) = %d, want %d", tc.in, tc.out, got, tc.want)
		}
	}
	if got := (Price{}).Cost(1e9, 1e9); got != 0 {
		t.Errorf("free model costs %d", got)
	}
}

// FuzzCost holds Cost to exact big-integer arithmetic.
func FuzzCost(f *testing.F) {
	f.Add(int64(10), int64(20), int64(300_000), int64(1_200_000))
	f.Add(int64(1)<<40, int64(1)<<40, int64(MaxPrice), int64(MaxPrice))
	f.Fuzz(func(t *testing.T, in, out, pin, pout int64) {
		pin, pout = min(max(pin, 0), MaxPrice), min(max(pout, 0), MaxPrice)
		got := Price{Input: pin, Output: pout}.Cost(in, out)
		sum := new(big.Int).Mul(big.NewInt(max(in, 0)), big.NewInt(pin))
		sum.Add(sum, new(big.Int).Mul(big.NewInt(max(out, 0)), big.NewInt(pout)))
		q, r := new(big.Int).QuoRem(sum, big.NewInt(1_000_000), new(big.Int))
		if r.Sign() > 0 {
			q.Add(q, big.NewInt(1))
		}
		if q.Cmp(big.NewInt(MaxAmount)) > 0 {
			q = big.NewInt(MaxAmount)
		}
		if got != q.Int64() {
			t.Fatalf("Cost(%d, %d) at %d/%d = %d, want %s", in, out, pin, pout, got, q)
		}
	})
}

// FuzzParse: whatever Parse accepts, Format writes back to the same value,
// and it equals the exact rational value of the text.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"5", "0.25", "1.0000001", "-1", "1e3", "00.000001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		if err != nil {
			return
		}
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("Parse accepted %q, which is not a number", s)
		}
		r.Mul(r, big.NewRat(Micros, 1))
		if !r.IsInt() || r.Num().Int64() != v {
			t.Fatalf("Parse(%q) = %d, exact value %s", s, v, r)
		}
		if back, err := Parse(Format(v)); err != nil || back != v {
			t.Fatalf("round trip of %q: %d, %v", s, back, err)
		}
	})
}
