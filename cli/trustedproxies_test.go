package cli

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// TestTrustedProxiesReachTheWebhook: WHILLY_TRUSTED_PROXIES is read with the App's
// variables and handed to the webhook receiver; a value that is not IPs and CIDRs exits 2
// naming the variable.
func TestTrustedProxiesReachTheWebhook(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
	env := map[string]string{
		"WHILLY_GITHUB_APP_ID": "4242", "WHILLY_GITHUB_PRIVATE_KEY": string(gh.KeyPEM),
		"WHILLY_GITHUB_WEBHOOK_SECRET": "s", "WHILLY_GITHUB_API_URL": gh.URL(), "WHILLY_DATA_DIR": t.TempDir(),
		"WHILLY_TRUSTED_PROXIES": "10.1.0.0/16, 192.0.2.7",
	}
	a, _ := githubTestApp(env)
	got, _, err := a.readGitHubEnv()
	want := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("192.0.2.7/32")}
	if err != nil || !slices.Equal(got.trustedProxies, want) {
		t.Fatalf("trusted proxies %v, %v; want %v", got.trustedProxies, err, want)
	}
	if ext, err := a.githubExtension(context.Background(), st, nil); err != nil || ext.routes["/webhook"] == nil {
		t.Fatalf("with trusted proxies: %+v, %v", ext, err)
	}
	env["WHILLY_TRUSTED_PROXIES"] = "10.1.0.0/16, proxy.internal"
	a, _ = githubTestApp(env)
	var ee *exitError
	if _, err := a.githubExtension(context.Background(), st, nil); !errors.As(err, &ee) || ee.code != ExitEnv ||
		!strings.Contains(err.Error(), "WHILLY_TRUSTED_PROXIES") || !strings.Contains(err.Error(), "proxy.internal") {
		t.Errorf("WHILLY_TRUSTED_PROXIES=proxy.internal: %v, want exit 2 naming it", err)
	}
}
