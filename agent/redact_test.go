package agent

import (
	"encoding/base64"
	"strings"
	"testing"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestRedact(t *testing.T) {
	t.Parallel()
	// Fake secrets assembled at run time, so no scanner mistakes this file for a leak.
	gh := "ghp_" + strings.Repeat("A1b2", 9)
	cases := []struct {
		in, want string
	}{
		{"token " + gh + " end", "token [REDACTED:github_token] end"},
		{"gho_" + strings.Repeat("x", 36), "[REDACTED:github_token]"},
		{"ghs_" + strings.Repeat("Z9", 18) + ".", "[REDACTED:github_token]."},
		{"github_pat_11ABCDEFG0_" + strings.Repeat("q", 59), "[REDACTED:github_token]"},
		{"ANTHROPIC_API_KEY is sk-ant-api03-" + strings.Repeat("k", 40), "ANTHROPIC_API_KEY is [REDACTED:anthropic_key]"},
		{"key: sk-proj-" + strings.Repeat("o", 48), "key: [REDACTED:openai_key]"},
		{"sk-" + strings.Repeat("a", 48), "[REDACTED:openai_key]"},
		{"aws AKIA" + "IOSFODNN7EXAMPLE here", "aws [REDACTED:aws_key] here"},
		{"slack xoxb-" + "123456789012-abcdefghijkl", "slack [REDACTED:slack_token]"},
		{"https://hooks.slack.com/services/T000/B000/XXXXXXXX", "[REDACTED:slack_webhook]"},
		{"-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----\nafter", redactedKey + "\nafter"},
		{"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA (cut off", redactedKey},
		{"Authorization: Bearer eyJhbGciOi.abc.def", "Authorization: Bearer [REDACTED]"},
		{`curl -H "Authorization: token ` + gh + `"`, `curl -H "Authorization: token [REDACTED]"`},
		{"authorization=Basic dXNlcjpwYXNz", "authorization=Basic [REDACTED]"},
		{"bearer abcdefgh12345678", "bearer [REDACTED]"},
		{"password=hunter2 next", "password=[REDACTED] next"},
		{`{"db_password": "s3cr3t!", "user": "bob"}`, `{"db_password": "[REDACTED]", "user": "bob"}`},
		{"AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY=[REDACTED]"},
		{"WHILLY_WORKER_TOKEN=wt_abc123", "WHILLY_WORKER_TOKEN=[REDACTED]"},
		{"api_key: abc123def", "api_key: [REDACTED]"},
		{"?client_secret=xyz&x=1", "?client_secret=[REDACTED]&x=1"},
		{"postgres://whilly:pa55word@db:5432/whilly", "postgres://whilly:[REDACTED]@db:5432/whilly"},
		{"https://x-access-token:" + gh + "@github.com/o/r.git", "https://x-access-token:[REDACTED]@github.com/o/r.git"},
		{"jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "jwt [REDACTED:jwt]"},
		{"AIza" + strings.Repeat("S", 35), "[REDACTED:google_key]"},
		// whilly's own tokens, as queue mints them: prefix + 43 base64url characters.
		{"worker token whilly_w_" + strings.Repeat("aB3-_", 8) + "xyz!", "worker token [REDACTED:whilly_token]!"},
		{"WHILLY_ADMIN=whilly_a_" + strings.Repeat("Qz9", 14) + "k", "WHILLY_ADMIN=[REDACTED:whilly_token]"},
		{`{"token":"whilly_r_` + strings.Repeat("r", 43) + `"}`, `{"token":"[REDACTED]"}`},
		{"curl -H 'X: whilly_b_" + strings.Repeat("b7", 22) + "'", "curl -H 'X: [REDACTED:whilly_token]'"},
		// A push token in git's extraheader, base64 of x-access-token:TOKEN, with or without the header name.
		{"http.https://github.com/.extraheader=AUTHORIZATION: basic " + b64("x-access-token:"+gh), "http.https://github.com/.extraheader=AUTHORIZATION: basic [REDACTED]"},
		{"git -c http.extraheader=\"basic " + b64("x-access-token:ghs_"+strings.Repeat("t", 36)) + "\" push", "git -c http.extraheader=\"basic [REDACTED:github_basic_auth]\" push"},
		{"Proxy-Authorization: Basic " + b64("bob:hunter2"), "Proxy-Authorization: Basic [REDACTED]"},
		{"credential x-access-token:v1.0123456789abcdef and more", "credential x-access-token:[REDACTED] and more"},
		{"gsk_" + strings.Repeat("g", 52), "[REDACTED:groq_key]"},
		// Left alone: ordinary text and token counts.
		{`"input_tokens": 0, "output_tokens": 12, max_tokens=4096`, `"input_tokens": 0, "output_tokens": 12, max_tokens=4096`},
		{"the task-list and disk-usage commands", "the task-list and disk-usage commands"},
		{`"apiKeySource":"none"`, `"apiKeySource":"none"`},
		{"see https://github.com/o/r/issues/1", "see https://github.com/o/r/issues/1"},
		{"ghp_short", "ghp_short"},
		{"", ""},
	}
	for _, c := range cases {
		got := Redact(c.in)
		if got != c.want {
			t.Errorf("Redact(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
		if again := Redact(got); again != got {
			t.Errorf("Redact is not idempotent on %q: %q", got, again)
		}
	}
}

// A key whose BEGIN line fell off the kept tail is still masked in the excerpt, and a
// token cut in half at the window's edge does not show its second half.
func TestRedactTail(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=\n", 40)
	out := "-----BEGIN PRIVATE KEY-----\n" + body + "-----END PRIVATE KEY-----\nresult line\n"
	got := redactTail([]byte(out), 200)
	if strings.Contains(got, "QUJDREVG") || !strings.Contains(got, "result line") {
		t.Errorf("redactTail = %q", got)
	}
	if len(got) > 200 {
		t.Errorf("redactTail kept %d bytes", len(got))
	}
	ex := excerpt([]byte(strings.Repeat("o", 10_000)), []byte(strings.Repeat("e", 10_000)))
	if len(ex) > MaxExcerptBytes || !strings.Contains(ex, "--- stderr ---") || strings.Count(ex, "e") < MaxExcerptBytes/2-100 {
		t.Errorf("excerpt of long stdout+stderr: %d bytes", len(ex))
	}
}
