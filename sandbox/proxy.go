package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxDenials bounds the denials one run reports: a CLI retrying a refused host must not
// flood the task's events.
const maxDenials = 20

// Why a connection was refused (Denial.Reason).
const (
	ReasonHost   = ""        // the host is not allowed
	ReasonSNI    = "sni"     // a tunnel's TLS ClientHello names another host than its CONNECT (Denial.Host is that name)
	ReasonNotTLS = "not_tls" // a tunnel does not start with a TLS ClientHello
)

// proxy is one run's egress: an HTTP proxy on a unix socket that the box's init bridges
// to a loopback port. It tunnels CONNECT to the allowed hosts when the tunnel starts
// with a TLS ClientHello naming the same host, and forwards plain http:// requests to
// the allowed hosts, each request of a connection checked on its own; everything else
// gets 403 (or a closed tunnel) and is reported once per host and port. It reaches the
// hosts through the worker's own HTTP proxy when the worker has one.
type proxy struct {
	ln       net.Listener
	srv      *http.Server
	fwd      *httputil.ReverseProxy
	tr       *http.Transport
	cfg      proxyConfig
	dialer   net.Dialer
	ctx      context.Context
	cancel   context.CancelFunc
	mu       sync.Mutex
	tunnels  map[net.Conn]struct{}
	denied   map[string]bool
	handlers sync.WaitGroup
}

// proxyConfig is what a run's proxy lets through, and how.
type proxyConfig struct {
	rules    []hostRule
	upstream upstream // the worker's own proxies; zero: none
	onDenied func(Denial)
}

// Timeouts of the proxy: for a client to send its request or its ClientHello, and to
// reach a host.
const (
	proxyReadTimeout = 30 * time.Second
	proxyDialTimeout = 15 * time.Second
)

func startProxy(ctx context.Context, path string, cfg proxyConfig) (*proxy, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("sandbox: listen for the agent's proxy: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("sandbox: restrict the agent's proxy socket: %w", err)
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &proxy{ln: ln, cfg: cfg, ctx: pctx, cancel: cancel, dialer: net.Dialer{Timeout: proxyDialTimeout},
		tunnels: map[net.Conn]struct{}{}, denied: map[string]bool{}}
	p.tr = &http.Transport{
		Proxy:               p.upstreamForPlain,
		DialContext:         p.dialer.DialContext,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     time.Minute,
	}
	p.fwd = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// Plain HTTP stays request and response: no switch to another protocol,
			// whose bytes the proxy would no longer read.
			pr.Out.Header.Del("Upgrade")
			pr.Out.Header.Del("Connection")
			pr.Out.Host = pr.Out.URL.Host
		},
		Transport: p.tr,
		ErrorLog:  discardLog(),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: proxyReadTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          discardLog(),
		BaseContext:       func(net.Listener) context.Context { return pctx },
	}
	p.handlers.Go(func() { _ = p.srv.Serve(ln) })
	return p, nil
}

func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }

// enter counts a handler in; it refuses once the proxy is closing.
func (p *proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		return false
	}
	p.handlers.Add(1)
	return true
}

// track adds or removes a tunnel's connection; it refuses new ones once the proxy is
// closing.
func (p *proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !add {
		delete(p.tunnels, c)
		return true
	}
	if p.ctx.Err() != nil {
		return false
	}
	p.tunnels[c] = struct{}{}
	return true
}

// close stops accepting, cuts every connection and waits for the handlers.
func (p *proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.cancel()
	for c := range p.tunnels {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.srv.Close()
	p.handlers.Wait()
	p.tr.CloseIdleConnections()
}

func (p *proxy) allowed(host string, port int) bool {
	for _, r := range p.cfg.rules {
		if r.allows(host, port) {
			return true
		}
	}
	return false
}

// report tells onDenied of a refusal, once per reason, host and port and at most
// maxDenials times.
func (p *proxy) report(d Denial) {
	d.Host = reportedHost(d.Host)
	key := d.Reason + " " + net.JoinHostPort(d.Host, strconv.Itoa(d.Port))
	p.mu.Lock()
	report := !p.denied[key] && len(p.denied) < maxDenials
	p.denied[key] = true
	p.mu.Unlock()
	if report && p.cfg.onDenied != nil {
		p.cfg.onDenied(d)
	}
}

// deny answers 403; a refused tunnel's connection is closed, a plain-HTTP connection
// may go on with its next request.
func (p *proxy) deny(w http.ResponseWriter, host string, port int, connect bool) {
	h := w.Header()
	h.Set("Content-Type", "text/plain")
	if connect {
		h.Set("Connection", "close")
	}
	w.WriteHeader(http.StatusForbidden)
	msg := "whilly sandbox: " + net.JoinHostPort(reportedHost(host), strconv.Itoa(port)) + " is not an allowed host (WHILLY_SANDBOX_ALLOW_HOSTS)\n"
	_, _ = io.WriteString(w, msg) //nolint:gosec // text/plain to the box's own client; the host is a valid name or a fixed text
	p.report(Denial{Host: host, Port: port})
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.enter() {
		return
	}
	defer p.handlers.Done()
	connect := r.Method == http.MethodConnect
	var hostport string
	switch {
	case connect:
		hostport = r.Host
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		hostport = r.URL.Host
	default:
		w.Header().Set("Connection", "close")
		http.Error(w, "whilly sandbox: only CONNECT and http:// requests go through this proxy", http.StatusBadRequest)
		return
	}
	host, port, ok := splitTarget(hostport, connect)
	if !ok {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if !p.allowed(host, port) {
		p.deny(w, host, port, connect)
		return
	}
	if connect {
		p.tunnel(w, r, host, port)
		return
	}
	p.fwd.ServeHTTP(w, r)
}

// tunnel reaches host:port, grants the tunnel, and passes the client's bytes on once its
// TLS ClientHello names host (or, for an IP address, names nothing).
func (p *proxy) tunnel(w http.ResponseWriter, r *http.Request, host string, port int) {
	dctx, cancel := context.WithTimeout(r.Context(), proxyDialTimeout)
	up, err := p.dialTunnel(dctx, host, port)
	cancel()
	if err != nil {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer func() { _ = up.Close() }()
	if !p.track(up, true) {
		return
	}
	defer p.track(up, false)
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer func() { _ = c.Close() }()
	if !p.track(c, true) {
		return
	}
	defer p.track(c, false)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(proxyReadTimeout))
	sni, hello, err := readClientHello(p.ctx, brw.Reader)
	_ = c.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		p.report(Denial{Host: host, Port: port, Reason: ReasonNotTLS})
		return
	case !sniMatches(host, sni):
		p.report(Denial{Host: sni, Port: port, Reason: ReasonSNI})
		return
	}
	if _, err := up.Write(hello); err != nil {
		return
	}
	pipe(c, brw.Reader, up)
}

// sniMatches reports whether a ClientHello's server name fits a tunnel to host: the same
// name, or none at all for an IP address.
func sniMatches(host, sni string) bool {
	sni = strings.TrimSuffix(strings.ToLower(sni), ".")
	if sni == "" {
		_, err := netip.ParseAddr(host)
		return err == nil
	}
	return sni == host
}

// maxClientHello bounds what the proxy reads of a tunnel before it knows the host the
// client asks for: a ClientHello is at most a few kilobytes.
const maxClientHello = 64 << 10

// errHelloRead stops crypto/tls once it has parsed the ClientHello.
var errHelloRead = errors.New("client hello read")

// readClientHello reads a TLS ClientHello from r without answering it (crypto/tls parses
// it; nothing is written to the client) and returns its server name and every byte read,
// to be replayed to the host. An error means the bytes are not a ClientHello.
func readClientHello(ctx context.Context, r io.Reader) (string, []byte, error) {
	rec := &helloConn{r: io.LimitReader(r, maxClientHello)}
	var sni string
	seen := false
	err := tls.Server(rec, &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni, seen = h.ServerName, true
		return nil, errHelloRead
	}}).HandshakeContext(ctx)
	if !seen {
		return "", nil, fmt.Errorf("read a TLS ClientHello: %w", err)
	}
	return sni, rec.buf.Bytes(), nil
}

// helloConn is what crypto/tls reads a ClientHello from: it records what it reads and
// throws away what crypto/tls would answer.
type helloConn struct {
	r   io.Reader
	buf bytes.Buffer
}

func (c *helloConn) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.buf.Write(b[:n])
	return n, err
}

func (c *helloConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *helloConn) Close() error                     { return nil }
func (c *helloConn) LocalAddr() net.Addr              { return &net.UnixAddr{Net: "unix"} }
func (c *helloConn) RemoteAddr() net.Addr             { return &net.UnixAddr{Net: "unix"} }
func (c *helloConn) SetDeadline(time.Time) error      { return nil }
func (c *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c *helloConn) SetWriteDeadline(time.Time) error { return nil }

// maxHostName is the length of the longest valid host name.
const maxHostName = 253

// reportedHost is host as a Denial may carry it: a valid host name or IP address, else
// a short description (the agent chooses what it asks for, and it lands in events).
func reportedHost(host string) string {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.String()
	}
	if host == "" {
		return "(none)" // a ClientHello without a server name
	}
	if len(host) > maxHostName || strings.Trim(host, "abcdefghijklmnopqrstuvwxyz0123456789.-") != "" {
		return fmt.Sprintf("(not a host name: %d bytes)", len(host))
	}
	return host
}

// splitTarget reads host:port, lowercased, without brackets or a trailing dot.
func splitTarget(hostport string, connect bool) (string, int, bool) {
	host, ps, err := net.SplitHostPort(hostport)
	port := 0
	switch {
	case err == nil:
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, false
		}
		port = n
	case connect:
		return "", 0, false
	default:
		host, port = hostport, 80
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	return host, port, host != ""
}

// pipe copies both ways until both sides are done; the client's bytes already read
// (br's buffer) go first.
func pipe(client net.Conn, br *bufio.Reader, up net.Conn) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, br)
		closeWrite(up)
		close(done)
	}()
	_, _ = io.Copy(client, up)
	closeWrite(client)
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
