package queue

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Scopes limit what a worker or an API token may read and claim. Each scope
// names installations, a repository or a plan:
//
//	installation:ID     plans of that GitHub App installation
//	repo:OWNER/NAME     plans of that repository (case-insensitive)
//	plan:ID             that plan
//
// A list of scopes allows a plan that any of them allows; an empty list allows every
// plan. Scopes are stored normalised (repo names in lower case), so that the database
// and Go compare them as plain strings: scopeMatchSQL and Scopes.Allow are the same rule.

// Scopes is a normalised list of scopes; empty allows every plan.
type Scopes []string

var (
	repoScopePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$`)
	planScopePattern = regexp.MustCompile(`^[A-Za-z0-9._:/-]{1,512}$`)
)

// MaxScopes bounds the scopes of one token or worker.
const MaxScopes = 64

// ParseScope checks one scope and returns it normalised.
func ParseScope(s string) (string, error) {
	kind, val, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok || val == "" {
		return "", fmt.Errorf("scope %q must be installation:ID, repo:OWNER/NAME or plan:ID: %w", s, ErrInvalid)
	}
	switch kind {
	case "installation":
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || n <= 0 {
			return "", fmt.Errorf("scope %q: the installation must be a positive number: %w", s, ErrInvalid)
		}
		return "installation:" + strconv.FormatInt(n, 10), nil
	case "repo":
		if !repoScopePattern.MatchString(val) || strings.Contains(val, "..") {
			return "", fmt.Errorf("scope %q: the repository must be OWNER/NAME: %w", s, ErrInvalid)
		}
		return "repo:" + strings.ToLower(val), nil
	case "plan":
		if !planScopePattern.MatchString(val) || strings.Contains(val, "..") {
			return "", fmt.Errorf("scope %q: the plan id is not valid: %w", s, ErrInvalid)
		}
		return "plan:" + val, nil
	}
	return "", fmt.Errorf("scope %q must be installation:ID, repo:OWNER/NAME or plan:ID: %w", s, ErrInvalid)
}

// ParseScopes checks and normalises a list of scopes, sorted and without duplicates.
func ParseScopes(list []string) (Scopes, error) {
	if len(list) > MaxScopes {
		return nil, fmt.Errorf("at most %d scopes are allowed: %w", MaxScopes, ErrInvalid)
	}
	out := make(Scopes, 0, len(list))
	for _, s := range list {
		n, err := ParseScope(s)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Unlimited reports whether the scopes allow every plan.
func (sc Scopes) Unlimited() bool { return len(sc) == 0 }

// Allow reports whether the scopes allow plan p. It is scopeMatchSQL in Go.
func (sc Scopes) Allow(p PlanInfo) bool {
	if sc.Unlimited() {
		return true
	}
	for _, s := range sc {
		kind, val, _ := strings.Cut(s, ":")
		switch {
		case kind == "plan" && val == p.ID,
			kind == "installation" && p.InstallationID != 0 && val == strconv.FormatInt(p.InstallationID, 10),
			kind == "repo" && p.Repo != "" && val == strings.ToLower(p.Repo):
			return true
		}
	}
	return false
}

// Within reports whether every scope of inner is one of sc, so that inner allows no plan
// sc does not. Unlimited sc contains everything; unlimited inner is within only an
// unlimited sc.
func (sc Scopes) Within(inner Scopes) bool {
	if sc.Unlimited() {
		return true
	}
	if inner.Unlimited() {
		return false
	}
	for _, s := range inner {
		if !slices.Contains(sc, s) {
			return false
		}
	}
	return true
}

// Strings returns the scopes as a non-nil []string, the form the database takes.
func (sc Scopes) Strings() []string { return nonNil([]string(sc)) }

// scopeMatchSQL is the condition that the plan row p is allowed by the scopes in the
// parameter param (a text[]; '{}' allows everything).
func scopeMatchSQL(param string) string {
	return fmt.Sprintf(`(%[1]s::text[] = '{}' OR ('plan:' || p.id) = ANY(%[1]s::text[])
		OR ('installation:' || p.installation_id::text) = ANY(%[1]s::text[])
		OR ('repo:' || lower(p.repo)) = ANY(%[1]s::text[]))`, param)
}
