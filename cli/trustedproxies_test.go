package cli

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/testkit"
)

// TestTrustedProxiesReachTheWebhook: with WHILLY_TRUSTED_PROXIES the control plane is
// built with its webhook; a value that is not IPs and CIDRs exits 2 naming the variable
// (what is read is server's TestTrustedProxiesAreRead).
func TestTrustedProxiesReachTheWebhook(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	env := map[string]string{
		"WHILLY_GITHUB_APP_ID": "4242", "WHILLY_GITHUB_PRIVATE_KEY": string(gh.KeyPEM),
		"WHILLY_GITHUB_WEBHOOK_SECRET": "s", "WHILLY_GITHUB_API_URL": gh.URL(), "WHILLY_DATA_DIR": t.TempDir(),
		"WHILLY_TRUSTED_PROXIES": "10.1.0.0/16, 192.0.2.7",
	}
	a, _ := githubTestApp(env)
	cp, err := a.newControlPlane(context.Background(), testkit.DB(t))
	if err != nil {
		t.Fatalf("with trusted proxies: %v", err)
	}
	_ = cp.Shutdown(context.Background())
	env["WHILLY_TRUSTED_PROXIES"] = "10.1.0.0/16, proxy.internal"
	a, _ = githubTestApp(env)
	var ee *exitError
	if _, err := a.newControlPlane(context.Background(), testkit.DB(t)); !errors.As(err, &ee) || ee.code != ExitEnv ||
		!strings.Contains(err.Error(), "WHILLY_TRUSTED_PROXIES") || !strings.Contains(err.Error(), "proxy.internal") {
		t.Errorf("WHILLY_TRUSTED_PROXIES=proxy.internal: %v, want exit 2 naming it", err)
	}
}
