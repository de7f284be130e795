package queue_test

import (
	"context"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/queue"
)

// TestMintedTokensAreRedacted: every kind of token whilly mints — worker, admin, read and
// bootstrap (registrar) — is masked by the redaction applied to agent output and logs.
func TestMintedTokensAreRedacted(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	_, worker, err := st.RegisterWorker(ctx, "host", nil)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{"worker": worker}
	for name, spec := range map[string]queue.TokenSpec{
		"admin":     {Owner: "ops@example.com", Admin: true},
		"read":      {Owner: "viewer@example.com"},
		"bootstrap": {Owner: "ci@example.com", Registrar: true},
	} {
		if tokens[name], _, err = st.Mint(ctx, spec); err != nil {
			t.Fatalf("mint %s token: %v", name, err)
		}
	}
	for name, tok := range tokens {
		for _, text := range []string{"the " + name + " token is " + tok + ".", "X-Token: " + tok, "export T=" + tok} {
			if got := agent.Redact(text); strings.Contains(got, tok) || strings.Contains(got, tok[len(tok)-12:]) {
				t.Errorf("%s token survives redaction: %q", name, got)
			}
		}
	}
}
