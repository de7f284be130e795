// Package config is whilly's one table of environment variables. The table is
// the single source for reading them (Env's typed methods), validating them (Env.Check
// reports every error of a command at once), the environment section of `whilly serve
// --help` and `whilly-worker --help` (Help), and the table in docs/configuration.md
// (Markdown). It imports only the standard library and package plan, so whilly-worker can
// use it.
//
// How to add a variable:
//
//  1. Add a Name constant in vars.go. Names are public: never rename one.
//  2. Add its Var to Vars in the same file: Kind, Default as a user would write it (or
//     DefaultText when the default is computed), the Commands that read it, one line of
//     Doc. Kind checks the value; Min/Max, Values and Check say what the kind cannot.
//  3. Read it with Env's typed methods (env.Duration(config.LeaseTTL) …), never os.Getenv:
//     a test fails on a WHILLY_* literal read anywhere else.
//  4. Run `make docs` (go generate ./internal/config) to refresh docs/configuration.md;
//     TestDocsUpToDate fails until you do.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/whilly-go/whilly/plan"
)

//go:generate go test -run TestDocsUpToDate -update .

// Name is an environment variable's name.
type Name string

// Kind says how a value is read and checked.
type Kind string

// The kinds of variables.
const (
	KindString   Kind = "string"
	KindInt      Kind = "int"
	KindNumber   Kind = "number"   // a decimal number
	KindUSD      Kind = "usd"      // an amount of USD, exact to the micro-dollar
	KindDuration Kind = "duration" // Go syntax (45s, 30m) or a plain number of seconds
	KindBool     Kind = "bool"     // 1, true, yes, on / 0, false, no, off
	KindURL      Kind = "url"
	KindEnum     Kind = "enum"
	KindList     Kind = "list"   // comma-separated
	KindPath     Kind = "path"   // a file or directory that need not exist yet
	KindFile     Kind = "file"   // a file that must exist and be readable
	KindSecret   Kind = "secret" // the value, or the contents of the file named by NAME_FILE
	KindAddr     Kind = "addr"   // host:port to listen on
	KindSize     Kind = "size"   // bytes: a whole number with an optional unit (512M, 4GiB, 10G)
)

// Command names a command that reads variables. Any is every whilly command that opens
// the database (all but a few, such as `whilly app manifest`).
type Command string

// The commands of Var.Commands.
const (
	Any       Command = "whilly"
	Serve     Command = "serve"
	Run       Command = "run"
	Init      Command = "init"
	Forge     Command = "forge"
	AppCmd    Command = "app"
	Doctor    Command = "doctor"
	Dashboard Command = "dashboard"
	Events    Command = "events"
	TaskCmd   Command = "task"
	Register  Command = "worker register"
	Worker    Command = "whilly-worker"
)

// Var is one row of the table.
type Var struct {
	Name    Name
	Section string // one of Sections
	Kind    Kind
	// Default is the value used when the variable is unset, written as a user would write
	// it; it must pass the variable's own checks. DefaultText replaces it in docs when the
	// default is computed ("the user cache directory").
	Default     string
	DefaultText string
	Commands    []Command
	Doc         string
	// Values are the allowed values of an enum (the first is not implied to be the default).
	Values []string
	// Min and Max bound ints and numbers when Max > Min.
	Min, Max float64
	// ZeroOK lets a duration be 0 (others must be positive).
	ZeroOK bool
	// Schemes are the URL schemes allowed (default http, https).
	Schemes []string
	// Needs names variables that must be set too when this one is set, for the commands
	// that read both.
	Needs []Name
	// Check validates what the kind cannot say; it gets the trimmed, non-empty value.
	Check func(string) error
}

// readsFor reports whether command c reads v.
func (v Var) readsFor(c Command) bool {
	return slices.Contains(v.Commands, c) || (slices.Contains(v.Commands, Any) && c != Worker)
}

// Env reads the table's variables through getenv (usually os.Getenv).
type Env struct {
	getenv func(string) string
	vars   map[Name]Var
}

// New returns an Env reading from getenv; nil reads an empty environment.
func New(getenv func(string) string) *Env {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	vars := map[Name]Var{}
	for _, v := range Vars() {
		vars[v.Name] = v
	}
	return &Env{getenv: getenv, vars: vars}
}

func (e *Env) lookup(n Name) Var {
	v, ok := e.vars[n]
	if !ok {
		// Unreachable for the Name constants: TestEveryNameInTable checks each one.
		panic(fmt.Sprintf("config: %s is not in the table of internal/config", n))
	}
	return v
}

// Raw returns the variable's trimmed value, "" when unset. It does not apply the default.
func (e *Env) Raw(n Name) string {
	e.lookup(n)
	return strings.TrimSpace(e.getenv(string(n)))
}

// IsSet reports whether the variable (or, for a secret, its _FILE twin) is set.
func (e *Env) IsSet(n Name) bool {
	v := e.lookup(n)
	return e.Raw(n) != "" || (v.Kind == KindSecret && strings.TrimSpace(e.getenv(string(n)+"_FILE")) != "")
}

// value is the set value or else the default, and whether it is the default.
func (e *Env) value(n Name) (string, bool) {
	if s := e.Raw(n); s != "" {
		return s, false
	}
	return e.lookup(n).Default, true
}

// String returns the value, or the default when unset. It never fails: use it for
// kinds string, path, enum, url and addr after Check, or when any text will do.
func (e *Env) String(n Name) string {
	s, _ := e.value(n)
	return s
}

// Int returns the value as an int, or the default.
func (e *Env) Int(n Name) (int, error) {
	if err := e.Err(n); err != nil {
		return 0, err
	}
	s, _ := e.value(n)
	if s == "" {
		return 0, nil
	}
	i, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", n, err)
	}
	return i, nil
}

// Number returns the value as a float64, or the default.
func (e *Env) Number(n Name) (float64, error) {
	if err := e.Err(n); err != nil {
		return 0, err
	}
	s, _ := e.value(n)
	if s == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", n, err)
	}
	return f, nil
}

// USD returns the value as an amount, or the default; ok is false when neither is set.
func (e *Env) USD(n Name) (amount plan.USD, ok bool, err error) {
	if err := e.Err(n); err != nil {
		return 0, false, err
	}
	s, _ := e.value(n)
	if s == "" {
		return 0, false, nil
	}
	u, err := plan.ParseUSD(s)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", n, err)
	}
	return u, true, nil
}

// Duration returns the value as a duration, or the default.
func (e *Env) Duration(n Name) (time.Duration, error) {
	if err := e.Err(n); err != nil {
		return 0, err
	}
	s, _ := e.value(n)
	if s == "" || e.lookup(n).ZeroOK && isZeroDuration(s) {
		return 0, nil
	}
	return ParseDuration(s)
}

func isZeroDuration(s string) bool {
	d, err := time.ParseDuration(s)
	return s == "0" || err == nil && d == 0
}

// Size returns the value in bytes, or the default.
func (e *Env) Size(n Name) (int64, error) {
	if err := e.Err(n); err != nil {
		return 0, err
	}
	s, _ := e.value(n)
	if s == "" {
		return 0, nil
	}
	return ParseSize(s)
}

// ParseSize reads a number of bytes: a whole number, optionally followed by a unit
// (K, M, G, T, with or without "iB" or "B"; all powers of 1024).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size such as 512M, 4GiB or 1073741824", s)
	}
	unit := strings.ToUpper(strings.TrimSpace(t[i:]))
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I")
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}
	sh, ok := shift[unit]
	if !ok || n > (1<<62)>>sh {
		return 0, fmt.Errorf("%q is not a size such as 512M, 4GiB or 1073741824", s)
	}
	return n << sh, nil
}

// Bool returns the value as a switch, or the default (false when none).
func (e *Env) Bool(n Name) (bool, error) {
	if err := e.Err(n); err != nil {
		return false, err
	}
	s, _ := e.value(n)
	b, _ := parseBool(s)
	return b, nil
}

// List returns the comma-separated items of the value, or of the default.
func (e *Env) List(n Name) []string {
	s, _ := e.value(n)
	return SplitList(s)
}

// Secret returns NAME, else the trimmed contents of the file named by NAME_FILE, else "".
func (e *Env) Secret(n Name) (string, error) {
	e.lookup(n)
	if err := e.Err(n); err != nil {
		return "", err
	}
	if s := e.Raw(n); s != "" {
		return s, nil
	}
	path := strings.TrimSpace(e.getenv(string(n) + "_FILE"))
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s_FILE: read %s: %w", n, path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Err checks one variable's value (not its Needs): nil when it is unset or valid.
func (e *Env) Err(n Name) error {
	v := e.lookup(n)
	if v.Kind == KindSecret {
		return e.secretErr(v)
	}
	s := e.Raw(n)
	if s == "" {
		return nil
	}
	if err := v.check(s); err != nil {
		return fmt.Errorf("%s: %w", n, err)
	}
	return nil
}

func (e *Env) secretErr(v Var) error {
	val, path := e.Raw(v.Name), strings.TrimSpace(e.getenv(string(v.Name)+"_FILE"))
	switch {
	case val != "" && path != "":
		return fmt.Errorf("%s and %s_FILE are both set: set one", v.Name, v.Name)
	case path != "":
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("%s_FILE: cannot read %s: %w", v.Name, path, unwrapPath(err))
		}
		val = strings.TrimSpace(string(b))
		if val == "" {
			return fmt.Errorf("%s_FILE: %s is empty", v.Name, path)
		}
	}
	if val != "" && v.Check != nil {
		if err := v.Check(val); err != nil {
			return fmt.Errorf("%s: %w", v.Name, err)
		}
	}
	return nil
}

// unwrapPath drops the *PathError's repeated path.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Check validates every variable that command reads, and the variables their Needs
// name, and returns all problems in one *Error (nil when there is none).
func (e *Env) Check(c Command) error {
	var problems []error
	for _, v := range Vars() {
		if !v.readsFor(c) {
			continue
		}
		if err := e.Err(v.Name); err != nil {
			problems = append(problems, err)
		}
		if !e.IsSet(v.Name) {
			continue
		}
		for _, need := range v.Needs {
			if nv := e.lookup(need); nv.readsFor(c) && !e.IsSet(need) {
				problems = append(problems, fmt.Errorf("%s is set but %s is not: %s", v.Name, need, nv.setHint()))
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &Error{Problems: problems}
}

func (v Var) setHint() string {
	if v.Kind == KindSecret {
		return fmt.Sprintf("set %s or %s_FILE", v.Name, v.Name)
	}
	return "set it (" + v.Doc + ")"
}

// Error is every configuration problem found at once.
type Error struct{ Problems []error }

func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return "configuration: " + e.Problems[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the configuration has %d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  - " + p.Error())
	}
	return b.String()
}

// Unwrap lets errors.Is/As see each problem.
func (e *Error) Unwrap() []error { return e.Problems }

// check validates a set, trimmed value of v.
func (v Var) check(s string) error {
	switch v.Kind {
	case KindInt:
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", s)
		}
		if err := v.bounds(float64(i), "a whole number", s); err != nil {
			return err
		}
	case KindNumber:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", s)
		}
		if err := v.bounds(f, "a number", s); err != nil {
			return err
		}
	case KindUSD:
		u, err := plan.ParseUSD(s)
		if err != nil || u < 0 {
			return fmt.Errorf("%q is not an amount of USD such as 10 or 2.50", s)
		}
	case KindDuration:
		if v.ZeroOK && isZeroDuration(s) {
			return nil
		}
		if _, err := ParseDuration(s); err != nil {
			return err
		}
	case KindBool:
		if _, ok := parseBool(s); !ok {
			return fmt.Errorf("%q is not 1 or 0 (true/false, yes/no, on/off)", s)
		}
	case KindURL:
		schemes := v.Schemes
		if len(schemes) == 0 {
			schemes = []string{"http", "https"}
		}
		if err := noScheme(s, schemes); err != nil {
			return err
		}
		u, err := url.Parse(s)
		if err != nil || u.Host == "" && u.Path == "" || !slices.Contains(schemes, u.Scheme) {
			return fmt.Errorf("%s is not a %s URL", redactURL(s), strings.Join(schemes, " or "))
		}
	case KindEnum:
		if !slices.Contains(v.Values, s) {
			return fmt.Errorf("%q is not one of %s", s, strings.Join(v.Values, ", "))
		}
	case KindFile:
		f, err := os.Open(s) // #nosec G304 -- the operator names the file
		if err != nil {
			return fmt.Errorf("cannot read %s: %w", s, unwrapPath(err))
		}
		_ = f.Close()
	case KindAddr:
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("%q is not an address such as 127.0.0.1:8000 or :8000", s)
		}
	case KindSize:
		n, err := ParseSize(s)
		if err != nil {
			return err
		}
		if err := v.bounds(float64(n), "a size", s); err != nil {
			return err
		}
	case KindString, KindList, KindPath, KindSecret:
	}
	if v.Check != nil {
		return v.Check(s)
	}
	return nil
}

func (v Var) bounds(f float64, what, s string) error {
	if v.Max > v.Min && (f < v.Min || f > v.Max) {
		return fmt.Errorf("%q is not %s from %s to %s", s, what, fmtNum(v.Min), fmtNum(v.Max))
	}
	return nil
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// bareHost is a host, an optional port and path: what a URL without its scheme usually is,
// and safe to echo (no user, password or key=value settings).
var bareHost = regexp.MustCompile(`^[A-Za-z0-9.\[\]:-]+(?:/[^\s@=]*)?$`)

// noScheme answers a URL written without its scheme (localhost:8080, example.com/x),
// which url.Parse misreads or refuses, with the URL to write instead; nil when s has a
// scheme. A value that may hold a password is not echoed.
func noScheme(s string, schemes []string) error {
	if strings.Contains(s, "://") {
		return nil
	}
	first := schemes[0]
	if slices.Contains(schemes, "https") {
		first = "https"
	}
	switch {
	case !bareHost.MatchString(s):
		return fmt.Errorf("the value has no scheme: start it with %s://", first)
	case first == "https":
		return fmt.Errorf("%q has no scheme: write https://%s (or http://%s)", s, s, s)
	default:
		return fmt.Errorf("%q has no scheme: write %s://%s", s, first, s)
	}
}

// redactURL drops a URL's password so an error never prints it.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "the value"
	}
	return strconv.Quote(u.Redacted())
}

// ParseDuration reads Go syntax (45s, 30m) or a plain number of seconds; the result must
// be positive.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseFloat(s, 64); err == nil && n > 0 {
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a duration such as 45s or 30m, or a number of seconds", s)
	}
	return d, nil
}

func parseBool(s string) (value, ok bool) {
	switch strings.ToLower(s) {
	case "1", "true", "yes", "on":
		return true, true
	case "", "0", "false", "no", "off":
		return false, true
	}
	return false, false
}

// SplitList splits a comma-separated list, dropping empty items and spaces.
func SplitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
