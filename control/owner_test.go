package control_test

import (
	"net/http"
	"strings"
	"testing"
)

// A registration's owner_email is the operator's word, shown and stored: a NUL byte, a
// control character, or more than an address may hold is refused with one sentence and
// registers nothing.
func TestRegisterRefusesAHostileOwnerEmail(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	before := e.stateDigest()
	for _, owner := range []string{"ops@example.com\x00admin", "ops@example.com\nX-Injected: 1", strings.Repeat("a", 250) + "@x.io"} {
		code, body := e.do(http.MethodPost, "/v1/workers/register", bootstrapToken, map[string]any{"hostname": "h", "owner_email": owner})
		if code != http.StatusBadRequest || !strings.Contains(body, "owner_email must be at most 254 printable characters") {
			t.Errorf("owner %q: %d %s; want 400 naming the field", owner, code, body)
		}
	}
	if after := e.stateDigest(); after != before {
		t.Errorf("a refused registration wrote something: %s -> %s", before, after)
	}
	if code, body := e.do(http.MethodPost, "/v1/workers/register", bootstrapToken, map[string]any{"hostname": "h", "owner_email": "ops@example.com"}); code != http.StatusOK && code != http.StatusCreated {
		t.Errorf("a plain owner: %d %s; want it registered", code, body)
	}
}
