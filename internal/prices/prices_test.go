package prices

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/plan"
)

func TestBuiltinPricesTheDefault(t *testing.T) {
	t.Parallel()
	tab, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tab.Models[tab.Default]; !ok || tab.Default != "gpt-5-codex" {
		t.Fatalf("default %q is not priced", tab.Default)
	}
	// 1,000,000 input of which 200,000 cached, 100,000 output at gpt-5-codex's
	// $1.25 / $0.125 / $10 per million: 0.8×1.25 + 0.2×0.125 + 0.1×10 = 2.025.
	e := tab.Cost("gpt-5-codex", 1_000_000, 200_000, 100_000)
	if e.Cost.String() != "2.025" || e.PricedAs != "gpt-5-codex" || e.Fallback {
		t.Errorf("cost = %+v, want 2.025 priced as gpt-5-codex", e)
	}
	// An unknown model (or none named) is charged the default's price, flagged.
	if e := tab.Cost("gpt-9-turbo", 1_000_000, 200_000, 100_000); e.Cost.String() != "2.025" || !e.Fallback || e.PricedAs != "gpt-5-codex" {
		t.Errorf("unknown model: %+v", e)
	}
	if e := tab.Cost("", 0, 0, 1); e.Cost != 10 || !e.Fallback {
		t.Errorf("one output token = %+v, want 10 micro-dollars (rounded up), fallback", e)
	}
}

func TestCostIsBounded(t *testing.T) {
	t.Parallel()
	tab, _ := Load("")
	if e := tab.Cost("o3", 1<<62, 1<<62, 1<<62); e.Cost != plan.MaxUSD {
		t.Errorf("huge counts cost %s, want the bound %s", e.Cost, plan.MaxUSD)
	}
	if e := tab.Cost("o3", -5, 7, -1); e.Cost != 0 {
		t.Errorf("negative counts cost %s, want 0", e.Cost)
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFileOverridesAndExtends(t *testing.T) {
	t.Parallel()
	p := writeFile(t, `{"default": "my-model", "models": {"my-model": {"input": 3, "output": 15}, "o3": {"input": 0, "cached_input": 0, "output": 1}}}`)
	tab, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if e := tab.Cost("my-model", 1_000_000, 500_000, 0); e.Cost.String() != "3" {
		t.Errorf("my-model without cached_input charges cached tokens at input: %+v, want 3", e)
	}
	if e := tab.Cost("o3", 1_000_000, 0, 1_000_000); e.Cost.String() != "1" {
		t.Errorf("overridden o3 = %+v, want 1", e)
	}
	if e := tab.Cost("gpt-5-mini", 0, 0, 1_000_000); e.Cost.String() != "2" || e.Fallback {
		t.Errorf("built-in gpt-5-mini kept: %+v, want 2", e)
	}
	if e := tab.Cost("unknown", 0, 0, 1_000_000); e.PricedAs != "my-model" || e.Cost.String() != "15" {
		t.Errorf("the file's default: %+v", e)
	}
}

func TestBadFiles(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, body, want string }{
		{"not json", `gpt-5: 1.25`, "not a price table"},
		{"typo key", `{"models": {"x": {"input": 1, "cached": 2}}}`, `unknown field "cached"`},
		{"negative", `{"models": {"x": {"input": -1, "output": 2}}}`, "must not be negative"},
		{"empty", `{"models": {}}`, "prices no model"},
		{"trailing", `{"models": {"x": {"input": 1}}} {}`, "data after the JSON object"},
		{"bad default", `{"default": "nope", "models": {"x": {"input": 1}}}`, `default model "nope" has no price`},
		{"blank name", `{"models": {" ": {"input": 1}}}`, "empty or has surrounding spaces"},
		{"amount", `{"models": {"x": {"input": "lots"}}}`, "not a price table"},
	} {
		p := writeFile(t, c.body)
		_, err := Load(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err = %v, want it to name the file and say %q", c.name, err, c.want)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: %v", err)
	}
}
