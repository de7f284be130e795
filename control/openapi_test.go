package control_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/control"
)

func TestOpenAPIIsServedWithoutAToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{control: control.Config{MetricsToken: "m"}})
	status, body := e.do("GET", "/v1/openapi.json", "", nil)
	if status != 200 || body != string(control.OpenAPI()) {
		t.Fatalf("/v1/openapi.json: %d, %d bytes; want 200 and the document", status, len(body))
	}
}

// Every $ref of the document points at something in it.
func TestOpenAPIRefsResolve(t *testing.T) {
	t.Parallel()
	var doc map[string]any
	if err := json.Unmarshal(control.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	refs := 0
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				refs++
				if !resolves(doc, ref) {
					t.Errorf("$ref %s does not resolve", ref)
				}
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(doc)
	if refs < 20 {
		t.Errorf("only %d $refs: is the document whole?", refs)
	}
}

func resolves(doc map[string]any, ref string) bool {
	path, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return false
	}
	var cur any = doc
	for _, part := range strings.Split(path, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[part]; !ok {
			return false
		}
	}
	return true
}
