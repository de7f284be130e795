package sandbox

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// upstream is the worker's own HTTP proxy (HTTPS_PROXY, HTTP_PROXY, NO_PROXY): the box's
// proxy reaches the allowed hosts through it, as the worker's own clients would. Its
// credentials (the URL's userinfo) go to it and never into the box.
type upstream struct {
	https, http *url.URL
	noProxy     []string
}

// upstreamFromEnv reads the worker's proxy settings, upper case first as Go's own
// clients do.
func upstreamFromEnv(getenv func(string) string) (upstream, error) {
	var u upstream
	var err error
	if u.https, err = proxyURL(getenv, "HTTPS_PROXY", "https_proxy"); err != nil {
		return u, err
	}
	if u.http, err = proxyURL(getenv, "HTTP_PROXY", "http_proxy"); err != nil {
		return u, err
	}
	for e := range strings.SplitSeq(strings.ToLower(firstSet(getenv, "NO_PROXY", "no_proxy")), ",") {
		if e = strings.TrimSpace(e); e != "" {
			u.noProxy = append(u.noProxy, e)
		}
	}
	return u, nil
}

func firstSet(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// proxyURL reads a proxy's URL from the first of names that is set: http:// (the default
// when there is no scheme) or https://. The error never repeats the value, which may
// hold a password.
func proxyURL(getenv func(string) string, names ...string) (*url.URL, error) {
	for _, n := range names {
		s := strings.TrimSpace(getenv(n))
		if s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			s = "http://" + s
		}
		u, err := url.Parse(s)
		if err != nil || u.Hostname() == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("sandbox: the worker's %s is not an http:// or https:// proxy URL, which the box's proxy could chain through", n)
		}
		return u, nil
	}
	return nil, nil
}

// via is the worker's proxy for a request of scheme (http, or https for a tunnel) to
// host:port; nil means direct. Loopback is always direct.
func (u upstream) via(scheme, host string, port int) *url.URL {
	pu := u.http
	if scheme == "https" {
		pu = u.https
	}
	if pu == nil || host == "localhost" || u.bypass(host, port) {
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil && a.IsLoopback() {
		return nil
	}
	return pu
}

// bypass reports whether NO_PROXY names host:port: "*", a domain (with its subdomains;
// a leading "." or "*." is the same), an IP address or CIDR block, each optionally with
// a port.
func (u upstream) bypass(host string, port int) bool {
	addr, addrErr := netip.ParseAddr(host)
	for _, e := range u.noProxy {
		if e == "*" {
			return true
		}
		if h, ps, err := net.SplitHostPort(e); err == nil {
			if n, err := strconv.Atoi(ps); err != nil || n != port {
				continue
			}
			e = h
		}
		e = strings.Trim(e, "[]")
		if pfx, err := netip.ParsePrefix(e); err == nil {
			if addrErr == nil && pfx.Contains(addr) {
				return true
			}
			continue
		}
		e = strings.TrimPrefix(strings.TrimPrefix(e, "*"), ".")
		if e != "" && (host == e || strings.HasSuffix(host, "."+e)) {
			return true
		}
	}
	return false
}

// String names the worker's proxies for a log line, without their credentials.
func (u upstream) String() string {
	var parts []string
	if u.https != nil {
		parts = append(parts, "https via "+proxyName(u.https))
	}
	if u.http != nil {
		parts = append(parts, "http via "+proxyName(u.http))
	}
	return strings.Join(parts, ", ")
}

// proxyName is a proxy's URL without its credentials.
func proxyName(u *url.URL) string { return u.Scheme + "://" + u.Host }

// upstreamForPlain is the worker's proxy for a plain http:// request (the Transport adds
// its Proxy-Authorization).
func (p *proxy) upstreamForPlain(r *http.Request) (*url.URL, error) {
	host, port, ok := splitTarget(r.URL.Host, false)
	if !ok {
		return nil, errors.New("no host")
	}
	return p.cfg.upstream.via("http", host, port), nil
}

// dialTunnel opens a connection to host:port, directly or through the worker's proxy.
func (p *proxy) dialTunnel(ctx context.Context, host string, port int) (net.Conn, error) {
	target := net.JoinHostPort(host, strconv.Itoa(port))
	pu := p.cfg.upstream.via("https", host, port)
	if pu == nil {
		return p.dialer.DialContext(ctx, "tcp", target)
	}
	return connectVia(ctx, &p.dialer, pu, target)
}

// connectVia asks the HTTP proxy at pu for a tunnel to target.
func connectVia(ctx context.Context, d *net.Dialer, pu *url.URL, target string) (net.Conn, error) {
	addr := pu.Host
	if pu.Port() == "" {
		addr = net.JoinHostPort(pu.Hostname(), map[string]string{"http": "80", "https": "443"}[pu.Scheme])
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("reach the worker's proxy %s: %w", proxyName(pu), err)
	}
	fail := func(err error) (net.Conn, error) {
		_ = c.Close()
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if pu.Scheme == "https" {
		tc := tls.Client(c, &tls.Config{ServerName: pu.Hostname(), MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(ctx); err != nil {
			return fail(fmt.Errorf("speak TLS with the worker's proxy %s: %w", proxyName(pu), err))
		}
		c = tc
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: target}, Host: target, Header: http.Header{}}
	if pu.User != nil {
		pass, _ := pu.User.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(pu.User.Username()+":"+pass)))
	}
	if err := req.Write(c); err != nil {
		return fail(fmt.Errorf("ask the worker's proxy %s for %s: %w", proxyName(pu), target, err))
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return fail(fmt.Errorf("read the worker's proxy %s's answer for %s: %w", proxyName(pu), target, err))
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("the worker's proxy %s refused %s: %s", proxyName(pu), target, resp.Status))
	}
	if br.Buffered() > 0 {
		return fail(fmt.Errorf("the worker's proxy %s sent bytes before the tunnel's", proxyName(pu)))
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}
