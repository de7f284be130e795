package sandbox

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// testProxy is a run's proxy on a unix socket, with the denials it reported.
type testProxy struct {
	sock    string
	denials chan Denial
}

func startTestProxy(t *testing.T, allow ...string) *testProxy {
	t.Helper()
	return startTestProxyVia(t, upstream{}, allow...)
}

// startTestProxyVia starts a proxy that reaches hosts through up.
func startTestProxyVia(t *testing.T, up upstream, allow ...string) *testProxy {
	t.Helper()
	dir, err := os.MkdirTemp("", "whilly-px-") // short: a unix socket's path is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var rules []hostRule
	for _, a := range allow {
		r, err := parseHostRule(a)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, r)
	}
	tp := &testProxy{sock: filepath.Join(dir, "proxy.sock"), denials: make(chan Denial, maxDenials)}
	p, err := startProxy(ctxT(t), tp.sock, proxyConfig{rules: rules, upstream: up, onDenied: func(d Denial) { tp.denials <- d }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return tp
}

func (tp *testProxy) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := (&net.Dialer{}).DialContext(ctxT(t), "unix", tp.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

// denial waits for the next denial the proxy reports.
func (tp *testProxy) denial(t *testing.T) Denial {
	t.Helper()
	select {
	case d := <-tp.denials:
		return d
	case <-ctxT(t).Done():
		t.Fatal("no denial reported")
	}
	return Denial{}
}

// connect asks the proxy for a tunnel to target and returns the connection and the
// proxy's status code.
func (tp *testProxy) connect(t *testing.T, target string) (net.Conn, *bufio.Reader, int) {
	t.Helper()
	c := tp.dial(t)
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %.40s: %v", target, err)
	}
	_ = resp.Body.Close()
	return c, br, resp.StatusCode
}

// tlsOrigin is a TLS server on 127.0.0.1 that records the SNI of each ClientHello it
// gets and answers every request with its SNI.
type tlsOrigin struct {
	*httptest.Server
	mu   sync.Mutex
	snis []string
}

func startTLSOrigin(t *testing.T) *tlsOrigin {
	t.Helper()
	o := &tlsOrigin{}
	o.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello "+r.TLS.ServerName)
	}))
	o.TLS = &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		o.mu.Lock()
		o.snis = append(o.snis, h.ServerName)
		o.mu.Unlock()
		return nil, nil
	}}
	o.Config.ErrorLog = discardLog()
	o.StartTLS()
	t.Cleanup(o.Close)
	return o
}

func (o *tlsOrigin) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.snis...)
}

// getOver speaks TLS with sni over c and GETs / through it.
func getOver(c net.Conn, br *bufio.Reader, sni string) (string, error) {
	tc := tls.Client(&bufferedConn{Conn: c, r: br}, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		return "", err
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://"+sni+"/", nil)
	if err := req.Write(tc); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Attack: a tunnel granted for an allowed host carries a ClientHello that names another
// host (domain fronting through a shared front end). The proxy must refuse it, report
// it, and never hand the hello to the allowed host.
func TestProxyRefusesSNIOfAnotherHost(t *testing.T) {
	t.Parallel()
	o := startTLSOrigin(t)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	tp := startTestProxy(t, fmt.Sprintf("127.0.0.1:%d", port))
	c, br, code := tp.connect(t, fmt.Sprintf("127.0.0.1:%d", port))
	if code != http.StatusOK {
		t.Fatalf("CONNECT to the allowed host: %d", code)
	}
	body, err := getOver(c, br, "evil.example.com")
	if err == nil {
		t.Fatalf("a ClientHello for evil.example.com went through a tunnel to 127.0.0.1: %q", body)
	}
	if d := tp.denial(t); d.Host != "evil.example.com" || d.Port != port || d.Reason != ReasonSNI {
		t.Errorf("denial = %+v", d)
	}
	// A tunnel to a name must name it: without a server name, the front end picks.
	tp = startTestProxy(t, fmt.Sprintf("localhost:%d", port))
	c, br, code = tp.connect(t, fmt.Sprintf("localhost:%d", port))
	if code != http.StatusOK {
		t.Fatalf("CONNECT to the allowed host: %d", code)
	}
	if body, err := getOver(c, br, ""); err == nil {
		t.Fatalf("a ClientHello without a server name went through a tunnel to localhost: %q", body)
	}
	if d := tp.denial(t); d.Host != "(none)" || d.Reason != ReasonSNI {
		t.Errorf("denial = %+v", d)
	}
	if s := o.seen(); len(s) != 0 {
		t.Errorf("the allowed host got ClientHellos for %q", s)
	}
}

// Attack: after a first plain-HTTP request to an allowed host, the rest of the
// connection carries a request for another host; it must be checked on its own.
func TestProxyChecksEveryPlainRequest(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	// An allowed front end that serves whatever host it is asked for and, like some
	// front ends do, reads on after a Connection: close.
	ln, err := (&net.ListenConfig{}).Listen(ctxT(t), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				br := bufio.NewReader(c)
				for {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					mu.Lock()
					got = append(got, r.Host+r.URL.Path)
					mu.Unlock()
					body := "from " + r.Host
					if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
						return
					}
				}
			}()
		}
	}()
	fh := ln.Addr().String()
	tp := startTestProxy(t, fh)
	c := tp.dial(t)
	if _, err := fmt.Fprintf(c, "GET http://%s/a HTTP/1.1\r\nHost: %s\r\n\r\nGET http://evil.example.com/b HTTP/1.1\r\nHost: evil.example.com\r\n\r\nGET http://%s/c HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
		fh, fh, fh, fh); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var codes []int
	for range 3 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, g := range got {
		if strings.Contains(g, "evil") {
			t.Errorf("the request for evil.example.com reached the allowed host: %q", got)
		}
	}
	if len(codes) != 3 || codes[0] != 200 || codes[1] != 403 || codes[2] != 200 {
		t.Errorf("statuses = %v, want [200 403 200]", codes)
	}
	if d := tp.denial(t); d.Host != "evil.example.com" || d.Port != 80 {
		t.Errorf("denial = %+v", d)
	}
}

// Attack: a host name of any length would land whole in the task's events.
func TestProxyBoundsDeniedHostNames(t *testing.T) {
	t.Parallel()
	tp := startTestProxy(t)
	long := strings.Repeat("a", 10_000) + ".com"
	_, _, code := tp.connect(t, long+":443")
	if code != http.StatusForbidden {
		t.Errorf("CONNECT to a 10 kB host: %d", code)
	}
	d := tp.denial(t)
	if len(d.Host) > 64 || !strings.Contains(d.Host, "10004 bytes") {
		t.Errorf("denial carries a host of %d bytes: %.80q", len(d.Host), d.Host)
	}
}

// A tunnel whose ClientHello names its CONNECT host passes; so does one to an IP
// address without a server name.
func TestProxyTunnelsMatchingSNI(t *testing.T) {
	t.Parallel()
	o := startTLSOrigin(t)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	tp := startTestProxy(t, fmt.Sprintf("localhost:%d", port), fmt.Sprintf("127.0.0.1:%d", port))
	for _, c := range []struct{ target, sni, want string }{
		{fmt.Sprintf("localhost:%d", port), "localhost", "hello localhost"},
		{fmt.Sprintf("LOCALHOST.:%d", port), "Localhost", "hello Localhost"}, // names are compared without case
		{fmt.Sprintf("127.0.0.1:%d", port), "", "hello "},
	} {
		conn, br, code := tp.connect(t, c.target)
		if code != http.StatusOK {
			t.Fatalf("CONNECT %s: %d", c.target, code)
		}
		if body, err := getOver(conn, br, c.sni); err != nil || body != c.want {
			t.Errorf("%s with SNI %q: %q %v", c.target, c.sni, body, err)
		}
	}
	select {
	case d := <-tp.denials:
		t.Errorf("denied: %+v", d)
	default:
	}
}

// A tunnel that does not start with a TLS ClientHello is closed before a byte of it
// reaches the host, and reported.
func TestProxyRefusesATunnelWithoutTLS(t *testing.T) {
	t.Parallel()
	ln, err := (&net.ListenConfig{}).Listen(ctxT(t), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	got := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		n, _ := io.Copy(io.Discard, c)
		got <- int(n)
	}()
	tp := startTestProxy(t, ln.Addr().String())
	c, br, code := tp.connect(t, ln.Addr().String())
	if code != http.StatusOK {
		t.Fatalf("CONNECT: %d", code)
	}
	if _, err := io.WriteString(c, "GET http://evil.example.com/ HTTP/1.1\r\nHost: evil.example.com\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(br); err != nil || len(b) != 0 {
		t.Errorf("the tunnel answered %q %v", b, err)
	}
	if d := tp.denial(t); d.Reason != ReasonNotTLS || d.Host != "127.0.0.1" {
		t.Errorf("denial = %+v", d)
	}
	select {
	case n := <-got:
		if n != 0 {
			t.Errorf("the host got %d bytes", n)
		}
	case <-ctxT(t).Done():
		t.Fatal("the host's connection was not closed")
	}
}

// upstreamProxy is the worker's own HTTP proxy in a test: it asks for credentials,
// records what it is asked, tunnels every CONNECT to origin (whatever the host: the
// names exist only here) and answers plain requests itself.
type upstreamProxy struct {
	ln     net.Listener
	origin string
	auth   string // the Proxy-Authorization it wants
	mu     sync.Mutex
	asked  []string
}

func startUpstreamProxy(t *testing.T, origin, auth string) *upstreamProxy {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(ctxT(t), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	u := &upstreamProxy{ln: ln, origin: origin, auth: auth}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	return u
}

func (u *upstreamProxy) serve(c net.Conn) {
	defer func() { _ = c.Close() }()
	br := bufio.NewReader(c)
	for {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		u.mu.Lock()
		u.asked = append(u.asked, r.Method+" "+r.RequestURI+" "+r.Header.Get("Proxy-Authorization"))
		u.mu.Unlock()
		if r.Header.Get("Proxy-Authorization") != u.auth {
			_, _ = io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
			continue
		}
		if r.Method != http.MethodConnect {
			body := "upstream served " + r.URL.String()
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			continue
		}
		o, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", u.origin)
		if err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n\r\n")
		pipe(c, br, o)
		_ = o.Close()
		return
	}
}

func (u *upstreamProxy) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.asked...)
}

// Behind the worker's own proxy, the box's proxy reaches allowed hosts through it, with
// the credentials of its URL, which never reach the box; the SNI check still holds.
func TestProxyChainsThroughTheWorkersProxy(t *testing.T) {
	t.Parallel()
	o := startTLSOrigin(t)
	up := startUpstreamProxy(t, o.Listener.Addr().String(), "Basic dXNlcjpwQHNz") // user:p@ss
	env := map[string]string{"HTTPS_PROXY": "http://user:p%40ss@" + up.ln.Addr().String(), "http_proxy": "http://user:p%40ss@" + up.ln.Addr().String(),
		"NO_PROXY": "internal.example"}
	u, err := upstreamFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	tp := startTestProxyVia(t, u, "registry.example.test", "plain.example.test", "other.example.test")
	c, br, code := tp.connect(t, "registry.example.test:443")
	if code != http.StatusOK {
		t.Fatalf("CONNECT through the worker's proxy: %d", code)
	}
	if body, err := getOver(c, br, "registry.example.test"); err != nil || body != "hello registry.example.test" {
		t.Errorf("through the worker's proxy: %q %v", body, err)
	}
	c, br, code = tp.connect(t, "other.example.test:443")
	if code != http.StatusOK {
		t.Fatalf("CONNECT through the worker's proxy: %d", code)
	}
	if body, err := getOver(c, br, "registry.example.test"); err == nil {
		t.Errorf("a ClientHello for another host went through the worker's proxy: %q", body)
	}
	if d := tp.denial(t); d.Reason != ReasonSNI {
		t.Errorf("denial = %+v", d)
	}
	pc := tp.dial(t)
	if _, err := io.WriteString(pc, "GET http://plain.example.test/pkg HTTP/1.1\r\nHost: plain.example.test\r\nProxy-Authorization: Basic Ym94OmJveA==\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(pc), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "upstream served http://plain.example.test/pkg" {
		t.Errorf("plain request through the worker's proxy: %d %q", resp.StatusCode, b)
	}
	want := []string{"CONNECT registry.example.test:443 Basic dXNlcjpwQHNz", "CONNECT other.example.test:443 Basic dXNlcjpwQHNz",
		"GET http://plain.example.test/pkg Basic dXNlcjpwQHNz"}
	if got := up.requests(); !slices.Equal(got, want) {
		t.Errorf("the worker's proxy was asked\n %q\nwant\n %q", got, want)
	}
}

// The worker's proxy refusing a tunnel is a 502 for the box.
func TestProxyChainRefused(t *testing.T) {
	t.Parallel()
	up := startUpstreamProxy(t, "127.0.0.1:1", "Basic right")
	u, err := upstreamFromEnv(func(k string) string {
		if k == "https_proxy" {
			return up.ln.Addr().String() // no scheme: http
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	tp := startTestProxyVia(t, u, "registry.example.test")
	if _, _, code := tp.connect(t, "registry.example.test:443"); code != http.StatusBadGateway {
		t.Errorf("CONNECT refused by the worker's proxy: %d", code)
	}
}

func TestUpstreamNoProxy(t *testing.T) {
	t.Parallel()
	env := map[string]string{"HTTPS_PROXY": "https://corp:3128", "NO_PROXY": " .corp.example, internal.example:8443,10.0.0.0/8, *.svc ,[::1]:443, fd00::1"}
	u, err := upstreamFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host   string
		port   int
		direct bool
	}{
		{"proxy.golang.org", 443, false},
		{"corp.example", 443, true},
		{"a.b.corp.example", 443, true},
		{"notcorp.example", 443, false},
		{"internal.example", 8443, true},
		{"internal.example", 443, false},
		{"10.1.2.3", 443, true},
		{"11.1.2.3", 443, false},
		{"x.svc", 443, true},
		{"fd00::1", 443, true},
		{"localhost", 443, true},
		{"127.0.0.1", 443, true},
	} {
		if got := u.via("https", c.host, c.port) == nil; got != c.direct {
			t.Errorf("%s:%d direct = %v, want %v", c.host, c.port, got, c.direct)
		}
	}
	if u.via("http", "proxy.golang.org", 80) != nil {
		t.Error("plain http goes through HTTPS_PROXY")
	}
	if got := u.String(); got != "https via https://corp:3128" {
		t.Errorf("String = %q", got)
	}
	env["NO_PROXY"] = "*"
	if u, _ = upstreamFromEnv(func(k string) string { return env[k] }); u.via("https", "proxy.golang.org", 443) != nil {
		t.Error("NO_PROXY=* still proxies")
	}
}

// Closing the proxy cuts the tunnels and the keep-alive connections still open.
func TestProxyCloseCutsConnections(t *testing.T) {
	t.Parallel()
	o := startTLSOrigin(t)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(front.Close)
	dir, err := os.MkdirTemp("", "whilly-px-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	rules := []hostRule{{host: "localhost", port: port}, {host: "127.0.0.1", port: front.Listener.Addr().(*net.TCPAddr).Port}}
	tp := &testProxy{sock: filepath.Join(dir, "p.sock")}
	p, err := startProxy(ctxT(t), tp.sock, proxyConfig{rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	c, br, code := tp.connect(t, fmt.Sprintf("localhost:%d", port))
	if code != http.StatusOK {
		t.Fatalf("CONNECT: %d", code)
	}
	tc := tls.Client(&bufferedConn{Conn: c, r: br}, &tls.Config{ServerName: "localhost", InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	kc := tp.dial(t)
	if _, err := fmt.Fprintf(kc, "GET %s/ HTTP/1.1\r\nHost: x\r\n\r\n", front.URL); err != nil {
		t.Fatal(err)
	}
	kbr := bufio.NewReader(kc)
	resp, err := http.ReadResponse(kbr, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("keep-alive request: %v %v", resp, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "ok" {
		t.Fatalf("keep-alive response: %q %v", b, err)
	}
	closed := make(chan struct{})
	go func() { p.close(); close(closed) }()
	select {
	case <-closed:
	case <-ctxT(t).Done():
		t.Fatal("close did not return with a tunnel open")
	}
	if _, err := tc.Read(make([]byte, 1)); err == nil {
		t.Error("the tunnel is still open")
	}
	if _, err := kbr.ReadByte(); err == nil {
		t.Error("the keep-alive connection is still open")
	}
}
