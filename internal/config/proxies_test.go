package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestTrustedProxies(t *testing.T) {
	t.Parallel()
	env := envOf(map[string]string{"WHILLY_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.7 ,::ffff:198.51.100.1, 2001:db8::1/48"})
	if err := env.Check(Serve); err != nil {
		t.Fatalf("Check(serve) = %v", err)
	}
	got, err := ParsePrefixes(env.List(TrustedProxies))
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("198.51.100.1/32"), netip.MustParsePrefix("2001:db8::/48")}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("ParsePrefixes = %v, %v; want %v", got, err, want)
	}

	bad := envOf(map[string]string{"WHILLY_TRUSTED_PROXIES": "10.0.0.1, proxy.internal"})
	err = bad.Check(Serve)
	if err == nil || !strings.Contains(err.Error(), `WHILLY_TRUSTED_PROXIES: "proxy.internal" is neither an IP address nor a CIDR prefix`) {
		t.Errorf("Check(serve) with a host name = %v, want it refused", err)
	}
}
