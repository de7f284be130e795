package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/testkit"
)

// TestOpenAPIMatchesTheRoutes walks the router `whilly serve` builds — with the GitHub App
// and the TRIZ analyzer configured, so that every extension mounts its routes — and fails
// when a route is missing from the OpenAPI document or the document names one that does
// not exist.
func TestOpenAPIMatchesTheRoutes(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	env := map[string]string{
		"WHILLY_GITHUB_APP_ID": "4242", "WHILLY_GITHUB_PRIVATE_KEY": string(gh.KeyPEM),
		"WHILLY_GITHUB_WEBHOOK_SECRET": "s", "WHILLY_GITHUB_API_URL": gh.URL(),
		"WHILLY_TRIZ_ENABLED": "1", "WHILLY_TRIZ_AGENT": "sim", "WHILLY_SANDBOX": "none",
	}
	a, _ := githubTestApp(env)
	cp, err := a.newControlPlane(context.Background(), testkit.DB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Shutdown(context.Background()) })
	routes, ok := cp.Handler().(chi.Routes)
	if !ok {
		t.Fatalf("the control plane's handler is a %T, not a chi router", cp.Handler())
	}
	served := routeSet(t, routes)

	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(control.OpenAPI(), &doc); err != nil {
		t.Fatalf("the OpenAPI document is not JSON: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			switch method {
			case "parameters", "summary", "description", "servers":
				continue
			}
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	for _, r := range sortedKeys(served) {
		anyMethod := strings.HasPrefix(r, "* ") && documentedAnyMethod(documented, r[2:])
		if !documented[r] && !anyMethod {
			t.Errorf("%s is served but not in control/openapi.json", r)
		}
	}
	for _, r := range sortedKeys(documented) {
		_, path, _ := strings.Cut(r, " ")
		if !served[r] && !served["* "+path] {
			t.Errorf("control/openapi.json documents %s, which is not served", r)
		}
	}
}

// routeSet is every METHOD PATH chi serves, paths written as OpenAPI writes them; a
// pattern mounted for every method (Mount, Handle) is "* PATH".
func routeSet(t *testing.T, routes chi.Routes) map[string]bool {
	t.Helper()
	methods := map[string][]string{}
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.TrimSuffix(strings.ReplaceAll(route, "/*/", "/"), "/")
		if route == "" {
			route = "/"
		}
		methods[route] = append(methods[route], method)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for route, ms := range methods {
		if slices.Contains(ms, http.MethodConnect) && slices.Contains(ms, http.MethodTrace) {
			out["* "+route] = true // registered for any method
			continue
		}
		for _, m := range ms {
			out[m+" "+route] = true
		}
	}
	if len(out) < 10 {
		t.Fatalf("walked only %d routes: %v", len(out), out)
	}
	return out
}

func documentedAnyMethod(documented map[string]bool, path string) bool {
	for r := range documented {
		if _, p, _ := strings.Cut(r, " "); p == path {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
