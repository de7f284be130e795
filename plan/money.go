package plan

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// USD is an amount of US dollars in integer micro-dollars (1 USD = 1,000,000), so budget
// sums never drift the way float64 sums do.
type USD int64

// MicrosPerUSD is the number of USD units in one dollar.
const MicrosPerUSD = 1_000_000

// MaxUSD is the largest amount whilly takes: what the database's numeric(14,6) holds,
// 99,999,999.999999 dollars. Every amount read (plan files, the API, the CLI, an agent's
// cost) is checked against it where it is parsed, so none overflows later.
const MaxUSD USD = 100_000_000*MicrosPerUSD - 1

// ErrTooLarge is the error of an amount beyond MaxUSD; its text says what the bound is.
var ErrTooLarge = errors.New("is too large: amounts must be less than 100000000 USD")

// usdDecimals is the number of fractional decimal digits a USD holds exactly.
const usdDecimals = 6

// maxExponent bounds the exponent of a parsed amount; anything beyond it cannot be a
// representable non-zero amount, and the bound keeps the arithmetic far from overflow.
const maxExponent = 1 << 20

// ParseUSD parses a non-negative decimal amount of dollars exactly: "5", "0.25", "5.0",
// ".5", "1.000001", and exponent forms such as "25e-2" when their value has at most six
// significant fractional digits (trailing zeros are fine: "1.50000000" is 1.5). Negative
// amounts, NaN, infinities, empty strings, surrounding spaces and amounts that do not fit
// in micro-dollars are errors.
func ParseUSD(s string) (USD, error) {
	u, err := parseDecimal(s)
	if err != nil {
		return 0, fmt.Errorf("parse amount %q: %w", s, err)
	}
	return u, nil
}

func parseDecimal(s string) (USD, error) {
	if s == "" {
		return 0, errors.New("is empty")
	}
	if s[0] == '-' {
		return 0, errors.New("must not be negative")
	}
	mant, exp, hasExp := s, "", false
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, exp, hasExp = s[:i], s[i+1:], true
	}
	intPart, fracPart, _ := strings.Cut(mant, ".")
	if (intPart == "" && fracPart == "") || !allDigits(intPart) || !allDigits(fracPart) {
		return 0, errors.New("is not a decimal number")
	}
	e := 0
	if hasExp {
		v, err := parseExponent(exp)
		if err != nil {
			return 0, err
		}
		e = v
	}
	return scaleDigits(intPart+fracPart, usdDecimals-len(fracPart)+e)
}

// scaleDigits returns the micro-dollar amount digits × 10^shift, where digits is a
// non-empty run of ASCII digits.
func scaleDigits(digits string, shift int) (USD, error) {
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return 0, nil
	}
	if shift < 0 {
		cut := len(digits) + shift
		if cut < 0 || strings.Trim(digits[max(cut, 0):], "0") != "" {
			return 0, errors.New("has more than 6 decimal places")
		}
		digits, shift = digits[:cut], 0
	}
	// MaxInt64 has 19 digits: anything longer overflows, and the loop below checks the rest.
	if len(digits)+shift > 19 {
		return 0, ErrTooLarge
	}
	var v uint64
	for i := range len(digits) + shift {
		d := uint64(0)
		if i < len(digits) {
			d = uint64(digits[i] - '0')
		}
		if v > (math.MaxInt64-d)/10 {
			return 0, ErrTooLarge
		}
		v = v*10 + d
	}
	if v > uint64(MaxUSD) {
		return 0, ErrTooLarge
	}
	return USD(v), nil
}

func parseExponent(s string) (int, error) {
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "" || !allDigits(s) {
		return 0, errors.New("is not a decimal number")
	}
	v := 0
	for i := 0; i < len(s); i++ {
		v = min(v*10+int(s[i]-'0'), maxExponent)
	}
	if neg {
		v = -v
	}
	return v, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// USDFromFloat converts a float amount, such as an agent's reported total_cost_usd, to
// USD, rounding half away from zero to the nearest micro-dollar. It rounds the shortest
// decimal form of f ("0.0000005" rounds up to 0.000001), not its binary expansion, so the
// result is what a person reading the number expects. Negative, NaN, infinite and
// too-large values are errors.
func USDFromFloat(f float64) (USD, error) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return 0, fmt.Errorf("convert amount %v: not a finite number", f)
	case f < 0:
		return 0, fmt.Errorf("convert amount %v: must not be negative", f)
	case f == 0: // -0 included, which would format with a sign
		return 0, nil
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	intPart, fracPart, _ := strings.Cut(s, ".")
	roundUp := len(fracPart) > usdDecimals && fracPart[usdDecimals] >= '5'
	if len(fracPart) > usdDecimals {
		fracPart = fracPart[:usdDecimals]
	}
	fracPart += strings.Repeat("0", usdDecimals-len(fracPart))
	u, err := scaleDigits(intPart+fracPart, 0)
	if err == nil && roundUp {
		if u == MaxUSD {
			err = ErrTooLarge
		}
		u++
	}
	if err != nil {
		return 0, fmt.Errorf("convert amount %v: %w", f, err)
	}
	return u, nil
}

// String returns the shortest exact decimal form: "0", "5", "0.25", "1.000001".
func (u USD) String() string {
	var b []byte
	m := uint64(u)
	if u < 0 {
		b = append(b, '-')
		m = -m
	}
	b = strconv.AppendUint(b, m/MicrosPerUSD, 10)
	if frac := m % MicrosPerUSD; frac != 0 {
		digits := strconv.FormatUint(frac+MicrosPerUSD, 10)[1:] // zero-padded to 6 digits
		b = append(b, '.')
		b = append(b, strings.TrimRight(digits, "0")...)
	}
	return string(b)
}

// Float64 returns the amount as the float64 nearest to its exact decimal value, for
// metrics and for agents that take a float spending cap.
func (u USD) Float64() float64 {
	f, err := strconv.ParseFloat(u.String(), 64)
	if err != nil { // unreachable: String always yields a valid decimal
		return float64(u) / MicrosPerUSD
	}
	return f
}

// MarshalJSON writes the amount as an exact JSON number (5, 0.25).
func (u USD) MarshalJSON() ([]byte, error) { return []byte(u.String()), nil }

// UnmarshalJSON reads a JSON number or a string holding one, exactly; null leaves u as
// it is, as encoding/json does for other types.
func (u *USD) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		var err error
		if s, err = strconv.Unquote(s); err != nil {
			return fmt.Errorf("parse amount %s: not a JSON string", b)
		}
	}
	v, err := ParseUSD(s)
	if err != nil {
		return err
	}
	*u = v
	return nil
}

// MarshalText writes the amount's decimal form, for flags and text encodings.
func (u USD) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// UnmarshalText parses a decimal amount as ParseUSD does (flag.TextVar, env config).
func (u *USD) UnmarshalText(b []byte) error {
	v, err := ParseUSD(string(b))
	if err != nil {
		return err
	}
	*u = v
	return nil
}

// Remaining returns how much of budget is left after spent, never less than zero; a nil
// budget is unlimited and yields nil. A negative spent (never valid) counts as zero.
func Remaining(budget *USD, spent USD) *USD {
	if budget == nil {
		return nil
	}
	var r USD
	if spent < *budget {
		r = *budget - max(spent, 0)
	}
	return &r
}

// Exhausted reports whether spent has reached budget (spent >= budget); an unlimited (nil)
// budget is never exhausted.
func Exhausted(budget *USD, spent USD) bool {
	return budget != nil && spent >= *budget
}
