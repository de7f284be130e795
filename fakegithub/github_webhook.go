package fakegithub

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
)

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
func WebhookRequest(ctx context.Context, url string, secret []byte, event, deliveryID string, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build webhook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/test")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", deliveryID)
	req.Header.Set("X-Hub-Signature-256", SignWebhook(secret, body))
	return req, nil
}
