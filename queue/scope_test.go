package queue_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

func TestParseScope(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"installation:42":       "installation:42",
		" installation:007 ":    "installation:7",
		"repo:Acme/Shop":        "repo:acme/shop",
		"plan:gh/acme/shop/7":   "plan:gh/acme/shop/7",
		"installation:0":        "",
		"installation:-1":       "",
		"installation:x":        "",
		"repo:acme":             "",
		"repo:acme/shop/extra":  "",
		"repo:../x":             "",
		"plan:a..b":             "",
		"plan:":                 "",
		"org:acme":              "",
		"installation":          "",
		"":                      "",
		"plan:has space":        "",
		"repo:acme/shop\nextra": "",
	} {
		got, err := queue.ParseScope(in)
		if want == "" {
			if err == nil || !errors.Is(err, queue.ErrInvalid) {
				t.Errorf("ParseScope(%q) = %q, %v; want ErrInvalid", in, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("ParseScope(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	sc, err := queue.ParseScopes([]string{"repo:B/x", "installation:2", "repo:b/X"})
	if err != nil || strings.Join(sc, " ") != "installation:2 repo:b/x" {
		t.Errorf("ParseScopes = %v, %v; want sorted, normalised, without duplicates", sc, err)
	}
}

// TestScopeRuleIsTheSameInSQLAndGo: ListPlans (SQL) and Scopes.Allow (Go) agree on every
// pair of plan and scope list.
func TestScopeRuleIsTheSameInSQLAndGo(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	plans := []struct {
		id, repo string
		inst     int64
	}{{"p1", "Acme/Shop", 1}, {"p2", "acme/other", 1}, {"p3", "victim/repo", 2}, {"p4", "", 0}, {"p5", "x/y", 0}}
	for _, p := range plans {
		pl := &plan.Plan{ID: p.id, Name: p.id, Repo: p.repo, Tasks: []plan.Task{goodTask("T")}}
		ref := ""
		if p.repo != "" {
			ref = p.repo + "#1"
		}
		if _, err := st.Import(ctx, pl, queue.ImportOptions{InstallationID: p.inst, GitHubIssueRef: ref}); err != nil {
			t.Fatal(err)
		}
	}
	for _, list := range [][]string{nil, {"installation:1"}, {"installation:2"}, {"repo:ACME/shop"}, {"plan:p4"},
		{"plan:p5", "installation:2"}, {"repo:x/y", "plan:p1"}, {"installation:3"}} {
		sc, err := queue.ParseScopes(list)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := st.ListPlans(ctx, queue.PlanPage{Scopes: sc, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var sqlIDs, goIDs []string
		for _, p := range got {
			sqlIDs = append(sqlIDs, p.ID)
		}
		for _, p := range plans {
			pi, err := st.GetPlan(ctx, p.id)
			if err != nil {
				t.Fatal(err)
			}
			if sc.Allow(pi) {
				goIDs = append(goIDs, p.id)
			}
		}
		if !slices.Equal(sqlIDs, goIDs) {
			t.Errorf("scopes %v: SQL allows %v, Go allows %v", list, sqlIDs, goIDs)
		}
		if len(list) == 0 && len(goIDs) != len(plans) {
			t.Errorf("no scopes allow %v, want every plan", goIDs)
		}
	}
}
