package testkit

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// WebhookFixturesDir is where the real GitHub webhook payloads live: the repository's copy
// in testdata/fixtures/github-webhooks. The test fails when it is not there.
func WebhookFixturesDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("testkit: cannot locate the testkit source to find the repository root")
	}
	root := filepath.Dir(filepath.Dir(filepath.Dir(file))) // internal/testkit/x.go → repo root
	dir := filepath.Join(root, "testdata", "fixtures", "github-webhooks")
	if _, err := os.Stat(filepath.Join(dir, "issues", "labeled.payload.json")); err != nil {
		t.Fatalf("testkit: the GitHub webhook fixtures are missing from %s: %v", dir, err)
	}
	return dir
}

// WebhookFixture decodes the real payload of event/file, e.g. ("issues", "labeled")
// reads issues/labeled.payload.json.
func WebhookFixture(t testing.TB, event, name string) map[string]any {
	t.Helper()
	path := filepath.Join(WebhookFixturesDir(t), event, name+".payload.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("testkit: read webhook fixture: %v", err)
	}
	var p map[string]any
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatalf("testkit: decode webhook fixture %s: %v", path, err)
	}
	return p
}

// WebhookPayload returns the fixture changed by the given dotted-path edits (e.g.
// "installation.id" → 42, "label.name" → "whilly-pending") and re-encoded, so that the
// rest of the payload stays real. An edit's parent objects are created as needed.
func WebhookPayload(t testing.TB, event, name string, edits map[string]any) []byte {
	t.Helper()
	p := WebhookFixture(t, event, name)
	for path, v := range edits {
		SetPath(p, path, v)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatalf("testkit: encode webhook payload: %v", err)
	}
	return b
}

// SetPath sets a dotted path in a decoded JSON object, creating objects on the way.
func SetPath(p map[string]any, path string, v any) {
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		next, ok := p[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			p[k] = next
		}
		p = next
	}
	p[keys[len(keys)-1]] = v
}

// SignWebhook returns the X-Hub-Signature-256 value of body under secret.
func SignWebhook(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// WebhookRequest builds a signed delivery as GitHub sends it.
func WebhookRequest(t testing.TB, url string, secret []byte, event, deliveryID string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatalf("testkit: build webhook request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/test")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", deliveryID)
	req.Header.Set("X-Hub-Signature-256", SignWebhook(secret, body))
	return req
}
