// Package prices is the per-model token price table whilly charges agents with that
// report tokens but not dollars (codex). The built-in table (prices.json, embedded) holds
// OpenAI's published list prices for the models Codex runs; they are estimates: what a run
// really costs depends on the account (a ChatGPT plan, a negotiated rate). An operator's
// file (WHILLY_PRICES_FILE) in the same format adds models and replaces the prices of
// those it names.
//
// The package uses the standard library and plan only: whilly-worker and the
// configuration table both import it.
package prices

import (
	"bytes"
	_ "embed" // the built-in table
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"sort"
	"strings"

	"github.com/whilly-go/whilly/plan"
)

//go:embed prices.json
var builtin []byte

// maxFileBytes bounds a prices file: a table of a few hundred models is far below it.
const maxFileBytes = 1 << 20

// Price is what a model charges, in USD per million tokens.
type Price struct {
	Input plan.USD `json:"input"` // input tokens not read from the cache
	// CachedInput is the price of input tokens read from the cache; absent, it is Input.
	CachedInput *plan.USD `json:"cached_input,omitempty"`
	Output      plan.USD  `json:"output"`
}

// Table maps model names to prices. Default names the model whose price is charged for a
// run whose model is not in the table (or not known: the agent's own default).
type Table struct {
	Default string
	Models  map[string]Price
}

type tableFile struct {
	Source  string           `json:"source,omitempty"`
	Default string           `json:"default,omitempty"`
	Models  map[string]Price `json:"models"`
}

// Load returns the built-in table, extended and overridden by the file at path when path
// is not empty. Its errors are one sentence naming the file and what is wrong in it.
func Load(path string) (Table, error) {
	t, err := parse(builtin)
	if err != nil {
		return Table{}, fmt.Errorf("built-in price table: %w", err)
	}
	if path == "" {
		return t, nil
	}
	f, err := os.Open(path) // #nosec G304 -- the operator names the file
	if err != nil {
		return Table{}, fmt.Errorf("read prices file: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return Table{}, fmt.Errorf("read prices file %s: %w", path, err)
	}
	if len(data) > maxFileBytes {
		return Table{}, fmt.Errorf("prices file %s is larger than %d bytes", path, maxFileBytes)
	}
	over, err := parse(data)
	if err != nil {
		return Table{}, fmt.Errorf("prices file %s: %w (expected {\"models\": {\"MODEL\": {\"input\": 1.25, \"cached_input\": 0.125, \"output\": 10}}}, USD per million tokens)", path, err)
	}
	for name, p := range over.Models {
		t.Models[name] = p
	}
	if over.Default != "" {
		t.Default = over.Default
	}
	if _, ok := t.Models[t.Default]; !ok {
		return Table{}, fmt.Errorf("prices file %s: default model %q has no price", path, t.Default)
	}
	return t, nil
}

// parse reads one table strictly: unknown keys, trailing data, empty names and negative
// prices (plan.USD's own check) are errors. A default, when given, must be priced in the same table unless it
// only picks a built-in model (checked by Load on the merged table).
func parse(data []byte) (Table, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f tableFile
	if err := dec.Decode(&f); err != nil {
		return Table{}, fmt.Errorf("not a price table: %w", err)
	}
	if dec.More() {
		return Table{}, errors.New("not a price table: data after the JSON object")
	}
	if len(f.Models) == 0 {
		return Table{}, errors.New(`it prices no model ("models" is empty or missing)`)
	}
	names := make([]string, 0, len(f.Models))
	for name := range f.Models {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names { // plan.USD refuses negative amounts itself
		if strings.TrimSpace(name) == "" || name != strings.TrimSpace(name) {
			return Table{}, fmt.Errorf("model name %q is empty or has surrounding spaces", name)
		}
	}
	return Table{Default: strings.TrimSpace(f.Default), Models: f.Models}, nil
}

// Estimate is the price of one run's tokens.
type Estimate struct {
	Cost plan.USD
	// PricedAs is the model whose price was charged; Fallback says it is the table's
	// default because the run's model is not in the table (or was not named).
	PricedAs string
	Fallback bool
}

// Cost prices a run of model: input tokens (cached ones included, as OpenAI counts them),
// of which cachedInput were read from the cache, and output tokens. Negative counts are 0;
// the cost is rounded up to the micro-dollar and never exceeds plan.MaxUSD.
func (t Table) Cost(model string, input, cachedInput, output int64) Estimate {
	e := Estimate{PricedAs: model}
	p, ok := t.Models[model]
	if !ok {
		e.PricedAs, e.Fallback = t.Default, true
		p = t.Models[t.Default]
	}
	input, cachedInput, output = max(input, 0), max(cachedInput, 0), max(output, 0)
	cachedInput = min(cachedInput, input)
	cached := p.Input
	if p.CachedInput != nil {
		cached = *p.CachedInput
	}
	// micro-dollars = tokens × (micro-dollars per million tokens) / 1e6, in big integers
	// so that no token count an agent prints can overflow.
	sum := new(big.Int)
	for _, term := range []struct {
		tokens int64
		price  plan.USD
	}{{input - cachedInput, p.Input}, {cachedInput, cached}, {output, p.Output}} {
		sum.Add(sum, new(big.Int).Mul(big.NewInt(term.tokens), big.NewInt(int64(term.price))))
	}
	million := big.NewInt(1_000_000)
	sum.Add(sum, big.NewInt(999_999)).Quo(sum, million)
	if !sum.IsInt64() || sum.Int64() > int64(plan.MaxUSD) {
		e.Cost = plan.MaxUSD
		return e
	}
	e.Cost = plan.USD(sum.Int64())
	return e
}
