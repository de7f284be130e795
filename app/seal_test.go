package app_test

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// sealFixture mints one push token for each of two ended leases of the issue plan, with
// the factory f, and returns the store, the plan and the leases.
func sealFixture(t *testing.T, f *app.Factory) (*queue.Store, queue.PlanInfo, []queue.Lease, []string) {
	t.Helper()
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
	info := importIssuePlan(t, st)
	ws, err := app.NewWorkspaces(f, st, nil, app.WorkspaceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var leases []queue.Lease
	var tokens []string
	for range 2 {
		l := lease() // no task holds it: it has ended
		w, err := ws.Workspace(context.Background(), info, l)
		if err != nil {
			t.Fatal(err)
		}
		leases, tokens = append(leases, l), append(tokens, w.Token)
	}
	return st, info, leases, tokens
}

func sealedOf(t *testing.T, st *queue.Store, leaseID string) []byte {
	t.Helper()
	var b []byte
	if err := st.Pool().QueryRow(context.Background(), `SELECT sealed FROM push_tokens WHERE lease_id = $1`, leaseID).Scan(&b); err != nil {
		t.Fatal(err)
	}
	return b
}

func revokedTokens(gh *testkit.GitHub) map[string]bool {
	out := map[string]bool{}
	for _, r := range gh.TokenRequests() {
		if !r.RevokedAt.IsZero() {
			out[r.Token] = true
		}
	}
	return out
}

// A sealed token is bound to its lease: copied onto another lease's row (by whoever can
// write the database), it does not open there, and the revocation of that lease fails
// rather than revoke — or hand on — a token that was never its own.
func TestASealedTokenMovedToAnotherLeaseDoesNotOpen(t *testing.T) {
	t.Parallel()
	gh, f := newFake(t)
	st, info, leases, tokens := sealFixture(t, f)
	ctx := context.Background()
	if _, err := st.Pool().Exec(ctx, `UPDATE push_tokens SET sealed = $1 WHERE lease_id = $2`,
		sealedOf(t, st, leases[1].LeaseID), leases[0].LeaseID); err != nil {
		t.Fatal(err)
	}
	err := app.NewPushTokens(st, f, nil, 0).RevokeEnded(ctx, info.ID)
	if err == nil || !strings.Contains(err.Error(), leases[0].LeaseID) {
		t.Fatalf("the revocation of a lease holding another lease's sealed token returned %v, want its failure", err)
	}
	revoked := revokedTokens(gh)
	if revoked[tokens[0]] {
		t.Errorf("lease 0's own token was revoked, though its row no longer holds it")
	}
	if !revoked[tokens[1]] {
		t.Errorf("lease 1's token was not revoked through its own row")
	}
}

// appDerivedAEAD is the seal of earlier versions: AES-GCM under a key derived from the
// App's private key.
func appDerivedAEAD(t *testing.T, gh *testkit.GitHub) cipher.AEAD {
	t.Helper()
	blk, _ := pem.Decode(gh.KeyPEM)
	key, err := x509.ParsePKCS1PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	derived := sha256.Sum256(append([]byte("whilly push token seal v1\x00"), x509.MarshalPKCS1PrivateKey(key)...))
	block, _ := aes.NewCipher(derived[:])
	aead, _ := cipher.NewGCM(block)
	return aead
}

// A token sealed before the upgrade, under the key the App's key derived, still opens for
// its revocation (it lives an hour at most).
func TestATokenSealedBeforeTheUpgradeIsStillRevoked(t *testing.T) {
	t.Parallel()
	gh, f := newFake(t)
	st, info, leases, tokens := sealFixture(t, f)
	aead := appDerivedAEAD(t, gh)
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		t.Fatal(err)
	}
	old := aead.Seal(nonce, nonce, []byte(tokens[0]), nil)
	ctx := context.Background()
	if _, err := st.Pool().Exec(ctx, `UPDATE push_tokens SET sealed = $1 WHERE lease_id = $2`, old, leases[0].LeaseID); err != nil {
		t.Fatal(err)
	}
	if err := app.NewPushTokens(st, f, nil, 0).RevokeEnded(ctx, info.ID); err != nil {
		t.Fatalf("revocation of a token sealed before the upgrade: %v", err)
	}
	if !revokedTokens(gh)[tokens[0]] {
		t.Error("the token sealed before the upgrade was not revoked")
	}
}

// The seal's key is not derived from the App's private key: what the App's key derives
// (the former seal key) does not open a sealed token.
func TestTheSealKeyIsNotTheAppKeys(t *testing.T) {
	t.Parallel()
	gh, f := newFake(t)
	st, _, leases, tokens := sealFixture(t, f)
	aead := appDerivedAEAD(t, gh)
	sealed := sealedOf(t, st, leases[0].LeaseID)
	for off := 0; off <= 1 && len(sealed) > off+aead.NonceSize(); off++ { // with or without a version byte
		n := sealed[off : off+aead.NonceSize()]
		if b, err := aead.Open(nil, n, sealed[off+aead.NonceSize():], nil); err == nil {
			t.Fatalf("a key derived from the App's private key opens the sealed token (%t)", string(b) == tokens[0])
		}
	}
}

// After the seal key is rotated (the new one current, the former one kept as
// WHILLY_TOKEN_SEAL_KEY_OLD), the tokens sealed under the former key still open for
// their revocation; without the former key they do not.
func TestSealedTokensOpenForRevocationAcrossAKeyRotation(t *testing.T) {
	t.Parallel()
	gh, _ := newFake(t)
	k1, k2 := []byte(strings.Repeat("1", 32)), []byte(strings.Repeat("2", 40))
	factory := func(key []byte, old ...[]byte) *app.Factory {
		f, err := app.NewFactory(app.Config{AppID: gh.AppID, PrivateKey: gh.KeyPEM, APIURL: gh.URL(), SealKey: key, OldSealKeys: old})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	st, info, _, tokens := sealFixture(t, factory(k1))
	ctx := context.Background()
	if err := app.NewPushTokens(st, factory(k2), nil, 0).RevokeEnded(ctx, info.ID); err == nil {
		t.Fatal("a control plane without the former key opened tokens sealed under it")
	}
	if err := app.NewPushTokens(st, factory(k2, k1), nil, 0).RevokeEnded(ctx, info.ID); err != nil {
		t.Fatalf("revocation with the former key kept: %v", err)
	}
	revoked := revokedTokens(gh)
	for i, tok := range tokens {
		if !revoked[tok] {
			t.Errorf("token %d sealed under the former key was not revoked", i)
		}
	}
	if _, err := app.NewFactory(app.Config{AppID: gh.AppID, PrivateKey: gh.KeyPEM, APIURL: gh.URL(), SealKey: []byte("short")}); err == nil {
		t.Error("a seal key of 5 bytes was accepted")
	}
}
