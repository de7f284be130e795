package sandbox

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxDenials bounds the denials one run reports: a CLI retrying a refused host must not
// flood the task's events.
const maxDenials = 20

// proxy is one run's egress: an HTTP proxy on a unix socket that the box's init bridges
// to a loopback port. It tunnels CONNECT, and forwards plain http:// requests, to the
// allowed hosts only; everything else gets 403 and is reported once per host and port.
type proxy struct {
	ln       net.Listener
	rules    []hostRule
	onDenied func(Denial)
	ctx      context.Context
	cancel   context.CancelFunc

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	denied map[string]bool
	wg     sync.WaitGroup
}

func startProxy(ctx context.Context, path string, rules []hostRule, onDenied func(Denial)) (*proxy, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("sandbox: listen for the agent's proxy: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("sandbox: restrict the agent's proxy socket: %w", err)
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &proxy{ln: ln, rules: rules, onDenied: onDenied, ctx: pctx, cancel: cancel,
		conns: map[net.Conn]struct{}{}, denied: map[string]bool{}}
	p.wg.Go(p.serve)
	return p, nil
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c, true) {
			_ = c.Close()
			return
		}
		p.wg.Go(func() {
			defer p.track(c, false)
			defer func() { _ = c.Close() }()
			p.handle(c)
		})
	}
}

// track adds or removes a connection; it refuses new ones once the proxy is closing.
func (p *proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !add {
		delete(p.conns, c)
		return true
	}
	if p.ctx.Err() != nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// close stops accepting, cuts every tunnel and waits for the handlers.
func (p *proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.cancel()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *proxy) allowed(host string, port int) bool {
	for _, r := range p.rules {
		if r.allows(host, port) {
			return true
		}
	}
	return false
}

func (p *proxy) deny(c net.Conn, host string, port int) {
	_, _ = io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"+
		"whilly sandbox: "+net.JoinHostPort(host, strconv.Itoa(port))+" is not an allowed host (WHILLY_SANDBOX_ALLOW_HOSTS)\n")
	key := net.JoinHostPort(host, strconv.Itoa(port))
	p.mu.Lock()
	report := !p.denied[key] && len(p.denied) < maxDenials
	p.denied[key] = true
	p.mu.Unlock()
	if report && p.onDenied != nil {
		p.onDenied(Denial{Host: host, Port: port})
	}
}

func (p *proxy) handle(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	connect := req.Method == http.MethodConnect
	var hostport string
	switch {
	case connect:
		hostport = req.Host
	case req.URL.IsAbs() && req.URL.Scheme == "http":
		hostport = req.URL.Host
	default:
		_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\nwhilly sandbox: only CONNECT and http:// requests go through this proxy\n")
		return
	}
	host, port, ok := splitTarget(hostport, connect)
	if !ok {
		_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
		return
	}
	if !p.allowed(host, port) {
		p.deny(c, host, port)
		return
	}
	dctx, cancel := context.WithTimeout(p.ctx, 15*time.Second)
	up, err := (&net.Dialer{}).DialContext(dctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	cancel()
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n")
		return
	}
	if !p.track(up, true) {
		_ = up.Close()
		return
	}
	defer p.track(up, false)
	defer func() { _ = up.Close() }()
	if connect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
	} else {
		// One request per connection: the client's next one comes through the proxy
		// again, and is checked again.
		req.Header.Del("Proxy-Connection")
		req.Header.Del("Proxy-Authorization")
		req.Close = true
		if err := req.Write(up); err != nil {
			return
		}
	}
	pipe(c, br, up)
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
