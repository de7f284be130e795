package sandbox

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
	o.TLS = &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
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
	tc := tls.Client(&bufferedConn{Conn: c, r: br}, &tls.Config{ServerName: sni, InsecureSkipVerify: true}) //nolint:gosec // a test server's certificate
	if err := tc.Handshake(); err != nil {
		return "", err
	}
	req, _ := http.NewRequest(http.MethodGet, "https://"+sni+"/", nil)
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
