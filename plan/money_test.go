package plan

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
)

func usd(v USD) *USD { return &v }

func TestParseUSD(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    USD
		wantErr string
	}{
		{in: "0", want: 0},
		{in: "5", want: 5_000_000},
		{in: "5.0", want: 5_000_000},
		{in: "0.25", want: 250_000},
		{in: ".5", want: 500_000},
		{in: "5.", want: 5_000_000},
		{in: "1.000001", want: 1_000_001},
		{in: "0.000001", want: 1},
		{in: "007.10", want: 7_100_000},
		{in: "1.50000000", want: 1_500_000},
		{in: "25e-2", want: 250_000},
		{in: "2.5E+1", want: 25_000_000},
		{in: "1e6", want: 1_000_000 * MicrosPerUSD},
		{in: "0.0000001e1", want: 1},
		{in: "0e999999999999", want: 0},
		{in: "99999999.999999", want: MaxUSD},
		{in: "100000000", wantErr: "amounts must be less than 100000000 USD"},
		{in: "1e8", wantErr: "amounts must be less than 100000000 USD"},
		{in: "9223372036854.775807", wantErr: "too large"},
		{in: "", wantErr: "is empty"},
		{in: "-1", wantErr: "must not be negative"},
		{in: "-0", wantErr: "must not be negative"},
		{in: "0.0000001", wantErr: "more than 6 decimal places"},
		{in: "1.0000015", wantErr: "more than 6 decimal places"},
		{in: "1e-7", wantErr: "more than 6 decimal places"},
		{in: "5e-999999999999", wantErr: "more than 6 decimal places"},
		{in: "9223372036854.775808", wantErr: "too large"},
		{in: "1e13", wantErr: "too large"},
		{in: "1e999999999999", wantErr: "too large"},
		{in: "NaN", wantErr: "not a decimal number"},
		{in: "Inf", wantErr: "not a decimal number"},
		{in: "+1", wantErr: "not a decimal number"},
		{in: " 1", wantErr: "not a decimal number"},
		{in: "1 ", wantErr: "not a decimal number"},
		{in: ".", wantErr: "not a decimal number"},
		{in: "1.2.3", wantErr: "not a decimal number"},
		{in: "1e", wantErr: "not a decimal number"},
		{in: "e5", wantErr: "not a decimal number"},
		{in: "1e+", wantErr: "not a decimal number"},
		{in: "0x10", wantErr: "not a decimal number"},
		{in: "1_000", wantErr: "not a decimal number"},
		{in: "$5", wantErr: "not a decimal number"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseUSD(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseUSD(%q) = %v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				if !strings.HasPrefix(err.Error(), "parse amount ") {
					t.Errorf("error %q does not say what was being done", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseUSD(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestUSDFromFloat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      float64
		want    USD
		wantErr string
	}{
		{in: 0, want: 0},
		{in: math.Copysign(0, -1), want: 0},
		{in: 5, want: 5_000_000},
		{in: 0.25, want: 250_000},
		{in: 0.1, want: 100_000},
		{in: 0.3, want: 300_000},
		{in: 1.000001, want: 1_000_001},
		{in: 0.0123456, want: 12_346},
		{in: 0.0000005, want: 1},
		{in: 0.00000049, want: 0},
		{in: 1.0000005, want: 1_000_001},
		{in: 0.9999996, want: 1_000_000},
		{in: 5e-324, want: 0},
		{in: 99999999.999999, want: MaxUSD},
		{in: 1e8, wantErr: "amounts must be less than 100000000 USD"},
		{in: 1e12, wantErr: "too large"},
		{in: -0.01, wantErr: "must not be negative"},
		{in: math.NaN(), wantErr: "not a finite number"},
		{in: math.Inf(1), wantErr: "not a finite number"},
		{in: math.Inf(-1), wantErr: "not a finite number"},
		{in: 1e13, wantErr: "too large"},
		{in: 1e300, wantErr: "too large"},
	}
	for _, tt := range tests {
		t.Run(strconv.FormatFloat(tt.in, 'g', -1, 64), func(t *testing.T) {
			t.Parallel()
			got, err := USDFromFloat(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("USDFromFloat(%v) = %v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("USDFromFloat(%v) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestUSDString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   USD
		want string
	}{
		{0, "0"},
		{5_000_000, "5"},
		{250_000, "0.25"},
		{1_000_001, "1.000001"},
		{1, "0.000001"},
		{10, "0.00001"},
		{123_456_789, "123.456789"},
		{100_000_000, "100"},
		{-250_000, "-0.25"},
		{MaxUSD, "99999999.999999"},
		{math.MinInt64, "-9223372036854.775808"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			if got := tt.in.String(); got != tt.want {
				t.Fatalf("USD(%d).String() = %q, want %q", int64(tt.in), got, tt.want)
			}
			if tt.in < 0 {
				return
			}
			back, err := ParseUSD(tt.want)
			if err != nil || back != tt.in {
				t.Fatalf("ParseUSD(%q) = %d, %v; want %d", tt.want, back, err, tt.in)
			}
			if got := tt.in.Float64(); got != mustFloat(t, tt.want) {
				t.Fatalf("Float64() = %v, want %v", got, tt.want)
			}
		})
	}
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	var f float64
	if err := json.Unmarshal([]byte(s), &f); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestUSDJSON(t *testing.T) {
	t.Parallel()
	type wire struct {
		Cost   USD  `json:"cost_usd"`
		Budget *USD `json:"budget_usd"`
	}
	b, err := json.Marshal(wire{Cost: 250_000, Budget: usd(5_000_000)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"cost_usd":0.25,"budget_usd":5}`; got != want {
		t.Fatalf("Marshal = %s, want %s", got, want)
	}
	b, err = json.Marshal(wire{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"cost_usd":0,"budget_usd":null}`; got != want {
		t.Fatalf("Marshal = %s, want %s", got, want)
	}

	tests := []struct {
		in      string
		want    wire
		wantErr string
	}{
		{in: `{"cost_usd": 0.1, "budget_usd": 10}`, want: wire{Cost: 100_000, Budget: usd(10_000_000)}},
		{in: `{"cost_usd": "0.1"}`, want: wire{Cost: 100_000}},
		{in: `{"cost_usd": null, "budget_usd": null}`, want: wire{}},
		{in: `{"cost_usd": 1e-2}`, want: wire{Cost: 10_000}},
		{in: `{"cost_usd": -0.1}`, wantErr: "must not be negative"},
		{in: `{"cost_usd": 0.0000001}`, wantErr: "more than 6 decimal places"},
		{in: `{"cost_usd": "abc"}`, wantErr: "not a decimal number"},
		{in: `{"cost_usd": true}`, wantErr: "not a decimal number"},
		{in: `{"cost_usd": {}}`, wantErr: "not a decimal number"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			var got wire
			err := json.Unmarshal([]byte(tt.in), &got)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Unmarshal(%s) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Cost != tt.want.Cost || (got.Budget == nil) != (tt.want.Budget == nil) ||
				(got.Budget != nil && *got.Budget != *tt.want.Budget) {
				t.Fatalf("Unmarshal(%s) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestUSDText(t *testing.T) {
	t.Parallel()
	var u USD
	if err := u.UnmarshalText([]byte("12.5")); err != nil || u != 12_500_000 {
		t.Fatalf("UnmarshalText = %d, %v", u, err)
	}
	if err := u.UnmarshalText([]byte("-1")); err == nil {
		t.Fatal("UnmarshalText accepted a negative amount")
	}
	if b, _ := u.MarshalText(); string(b) != "12.5" {
		t.Fatalf("MarshalText = %s", b)
	}
}

func TestRemainingAndExhausted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		budget        *USD
		spent         USD
		wantRemaining *USD
		wantExhausted bool
	}{
		{"unlimited", nil, 1_000_000, nil, false},
		{"unlimited nothing spent", nil, 0, nil, false},
		{"nothing spent", usd(5_000_000), 0, usd(5_000_000), false},
		{"some spent", usd(5_000_000), 1_250_000, usd(3_750_000), false},
		{"one micro left", usd(5_000_000), 4_999_999, usd(1), false},
		{"exactly spent", usd(5_000_000), 5_000_000, usd(0), true},
		{"overspent", usd(5_000_000), 7_000_000, usd(0), true},
		{"zero budget", usd(0), 0, usd(0), true},
		{"negative spent counts as zero", usd(5_000_000), -1_000_000, usd(5_000_000), false},
		{"huge spent", usd(1), math.MaxInt64, usd(0), true},
		{"huge budget negative spent", usd(math.MaxInt64), math.MinInt64, usd(math.MaxInt64), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Remaining(tt.budget, tt.spent)
			switch {
			case (got == nil) != (tt.wantRemaining == nil):
				t.Fatalf("Remaining = %v, want %v", got, tt.wantRemaining)
			case got != nil && *got != *tt.wantRemaining:
				t.Fatalf("Remaining = %s, want %s", *got, *tt.wantRemaining)
			case got != nil && got == tt.budget:
				t.Fatal("Remaining returned the budget pointer itself")
			}
			if got := Exhausted(tt.budget, tt.spent); got != tt.wantExhausted {
				t.Fatalf("Exhausted = %v, want %v", got, tt.wantExhausted)
			}
		})
	}
}
