package agent

import (
	"strings"
	"testing"
)

func TestFindSecretsUsesRedactsPatterns(t *testing.T) {
	t.Parallel()
	gh := "ghp_" + strings.Repeat("A1b2", 9)
	cases := []struct {
		in    string
		kinds []string
		value string // of the first finding
	}{
		{"nothing to see here", nil, ""},
		{"token " + gh + " end", []string{"github_token"}, gh},
		{"-----BEGIN RSA PRIVATE KEY-----", []string{"private_key"}, "-----BEGIN RSA PRIVATE KEY-----"},
		{"aws AKIA" + "IOSFODNN7EXAMPLE here", []string{"aws_key"}, "AKIA" + "IOSFODNN7EXAMPLE"},
		// Found once, by the more specific pattern, not again as an assignment.
		{"GITHUB_TOKEN=" + gh, []string{"github_token"}, gh},
		{"password=hunter2 next", []string{"assignment"}, "hunter2"},
		{`api_key = "abc123def456"`, []string{"assignment"}, "abc123def456"},
		{"postgres://whilly:pa55word@db:5432/whilly", []string{"url_credentials"}, "pa55word"},
		{`curl -H "Authorization: token abcdef123456"`, []string{"authorization"}, "abcdef123456"},
		{"bearer abcdefgh12345678", []string{"bearer"}, "abcdefgh12345678"},
		{"max_tokens=4096", nil, ""},
	}
	for _, c := range cases {
		got := FindSecrets(c.in)
		var kinds []string
		for _, f := range got {
			kinds = append(kinds, f.Kind)
		}
		if strings.Join(kinds, ",") != strings.Join(c.kinds, ",") {
			t.Errorf("FindSecrets(%q) kinds = %v, want %v", c.in, kinds, c.kinds)
			continue
		}
		if len(got) > 0 && got[0].Value != c.value {
			t.Errorf("FindSecrets(%q) value = %q, want %q", c.in, got[0].Value, c.value)
		}
		// Whatever Redact masks, FindSecrets reports, and the other way round.
		if (Redact(c.in) != c.in) != (len(got) > 0) {
			t.Errorf("FindSecrets(%q) = %v but Redact gives %q", c.in, got, Redact(c.in))
		}
	}
}

func TestEverySecretPatternHasAKind(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, p := range secretPatterns {
		kind, _ := secretKind(p.repl, p.hints)
		if kind == "" {
			t.Errorf("pattern %s has no kind", p.re())
		}
		seen[kind] = true
	}
	for _, k := range []string{"url_credentials", "authorization", "bearer", "assignment", "github_token", "private_key"} {
		if !seen[k] {
			t.Errorf("no pattern of kind %s", k)
		}
	}
}
