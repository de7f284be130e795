package webhook_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
	"github.com/whilly-go/whilly/webhook"
)

// edge serves the webhook mounted in the control plane, as `whilly serve` serves it, on
// 127.0.0.1; clients dial from other loopback addresses (127.0.0.2, …) to be strangers.
type edge struct {
	addr string
	pool *pgxpool.Pool
	hook *webhook.Handler
}

func newEdge(t *testing.T, cfg webhook.Config, cc control.Config) *edge {
	t.Helper()
	pool := testkit.DB(t)
	st := queue.NewStore(pool, nil, queue.Config{})
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Secret, cfg.Events = secret, events()
	hook, err := webhook.New(st, func(ctx context.Context, tx pgx.Tx, id string) error {
		_, err := jobs.InsertTx(ctx, tx, queue.GitHubDeliveryArgs{DeliveryID: id}, nil)
		return err
	}, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := control.New(st, queue.NewListener(pool, nil), nil, cc)
	srv.Mount("/webhook", hook)
	hs := srv.HTTPServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return &edge{addr: ln.Addr().String(), pool: pool, hook: hook}
}

// dialFrom opens a TCP connection to addr from the loopback address from.
func dialFrom(from, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial from %s: %w", from, err)
	}
	return conn, nil
}

// rawRequest is a webhook request written by hand on a raw connection.
type rawRequest struct {
	from      string // the loopback address the connection comes from
	id        string // X-GitHub-Delivery
	length    int    // Content-Length announced
	forwarded string // X-Forwarded-For, when not empty
	signature string // X-Hub-Signature-256; "sha256=00" when empty
	body      []byte // sent at once after the headers
}

func (q rawRequest) head() string {
	sig := q.signature
	if sig == "" {
		sig = "sha256=00"
	}
	h := "POST /webhook HTTP/1.1\r\nHost: whilly\r\nContent-Type: application/json\r\n" +
		"X-GitHub-Event: issues\r\nX-GitHub-Delivery: " + q.id + "\r\nX-Hub-Signature-256: " + sig + "\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n", q.length)
	if q.forwarded != "" {
		h += "X-Forwarded-For: " + q.forwarded + "\r\n"
	}
	return h + "\r\n"
}

// stall sends the request's headers and body and then nothing more; it returns the status
// code the server answers with ("closed" when it closes without one), once it does.
func stall(t *testing.T, addr string, q rawRequest) <-chan string {
	t.Helper()
	conn, err := dialFrom(q.from, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(conn).ReadString('\n')
		if f := strings.Fields(line); len(f) >= 2 {
			answer <- f[1]
			return
		}
		answer <- "closed"
	}()
	go func() { _, _ = conn.Write(append([]byte(q.head()), q.body...)) }() // fails once the server closes
	return answer
}

// signedFrom sends a correctly signed delivery from the loopback address from, with
// X-Forwarded-For forwarded when not empty, and returns the status code.
func signedFrom(t *testing.T, addr, from, forwarded, id string, body []byte) int {
	t.Helper()
	req := testkit.WebhookRequest(t, "http://"+addr+"/webhook", secret, "issues", id, body)
	if forwarded != "" {
		req.Header.Set("X-Forwarded-For", forwarded)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
			return d.DialContext(ctx, network, a)
		},
	}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("signed delivery %s from %s: %v", id, from, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func stored(t *testing.T, pool *pgxpool.Pool, id string) bool {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_deliveries WHERE delivery_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestSlowStrangersDoNotBlockSignedDeliveries: three strangers keep connections open
// that announce 25 MB bodies and trickle a byte at a time, reconnecting whenever they are
// cut off, against the receiver with its default limits. A correctly signed delivery
// that arrives meanwhile is answered 202 and stored: the strangers hold what they sent,
// not what they announced.
func TestSlowStrangersDoNotBlockSignedDeliveries(t *testing.T) {
	t.Parallel()
	e := newEdge(t, webhook.Config{}, control.Config{})
	ctx, stop := context.WithCancel(context.Background())
	var strangers sync.WaitGroup
	held := make(chan struct{}, 16)
	for i, from := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		strangers.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				trickle(ctx, e.addr, rawRequest{from: from, id: fmt.Sprintf("stranger-%d-%d", i, n), length: webhook.DefaultMaxBytes}, held)
			}
		})
	}
	t.Cleanup(func() { stop(); strangers.Wait() })
	for range 3 { // every stranger's body is under way
		<-held
	}
	body := testkit.WebhookPayload(t, "issues", "opened", nil)
	for i := range 3 {
		id := fmt.Sprintf("from-github-%d", i)
		if got := signedFrom(t, e.addr, "127.0.0.1", "", id, body); got != http.StatusAccepted {
			t.Fatalf("a signed delivery among slow strangers got %d, want 202", got)
		}
		if !stored(t, e.pool, id) {
			t.Fatalf("delivery %s answered 202 but not stored", id)
		}
	}
}

// trickle sends a request's headers, then a byte every 50 ms until the server answers or
// ctx ends; it signals held once the first byte of the body is sent.
func trickle(ctx context.Context, addr string, q rawRequest, held chan<- struct{}) {
	conn, err := dialFrom(q.from, addr)
	if err != nil {
		return
	}
	defer conn.Close()
	answered := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(conn).ReadString('\n')
		close(answered)
	}()
	if _, err := conn.Write([]byte(q.head() + "{")); err != nil {
		return
	}
	select {
	case held <- struct{}{}:
	default:
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-answered:
			return
		case <-tick.C:
			if _, err := conn.Write([]byte(" ")); err != nil && !errors.Is(err, net.ErrClosed) {
				return
			}
		}
	}
}

// waitHeld waits until the receiver holds want bytes for client.
func waitHeld(t *testing.T, h *webhook.Handler, client string, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for webhook.HeldBy(h, client) != want {
		if time.Now().After(deadline) {
			t.Fatalf("the receiver holds %d bytes for %s, want %d", webhook.HeldBy(h, client), client, want)
		}
		runtime.Gosched()
	}
}

// padded is a signed issues delivery of about n bytes.
func padded(t *testing.T, n int) []byte {
	return testkit.WebhookPayload(t, "issues", "opened", map[string]any{"issue.body": strings.Repeat("x", n)})
}

// answer waits for a stalled request's answer.
func answer(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("no answer in 30 s")
		return ""
	}
}

const held = 600 << 10 // what a stalled stranger has sent

// TestOneAddressHoldsNoMoreThanItsCap: a stranger at 127.0.0.2 holds 600 KiB of a body
// he does not finish, under a cap of 1 MiB per address and 8 MiB in all. A signed 500 KiB
// delivery from the same address is answered 429 and not stored, and so is another
// stalled body of his; the same delivery from 127.0.0.3 is answered 202 and stored.
func TestOneAddressHoldsNoMoreThanItsCap(t *testing.T) {
	t.Parallel()
	e := newEdge(t, webhook.Config{MaxBytes: 1 << 20, MaxInFlightBytes: 8 << 20, QueueWait: 200 * time.Millisecond, BodyTimeout: time.Minute}, control.Config{})
	first := stall(t, e.addr, rawRequest{from: "127.0.0.2", id: "stranger-1", length: 1 << 20, body: []byte("{" + strings.Repeat(" ", held-1))})
	waitHeld(t, e.hook, "127.0.0.2", held)

	body := padded(t, 500<<10)
	same := stall(t, e.addr, rawRequest{from: "127.0.0.2", id: "same-address", length: len(body), signature: testkit.SignWebhook(secret, body), body: body})
	if got := answer(t, same); got != "429" {
		t.Errorf("a signed delivery from an address holding 600 KiB of its 1 MiB got %s, want 429", got)
	}
	second := stall(t, e.addr, rawRequest{from: "127.0.0.2", id: "stranger-2", length: 1 << 20, body: []byte("{" + strings.Repeat(" ", held-1))})
	if got := answer(t, second); got != "429" {
		t.Errorf("a second stalled body from the same address got %s, want 429", got)
	}
	if got := webhook.HeldBy(e.hook, "127.0.0.2"); got != held {
		t.Errorf("127.0.0.2 holds %d bytes after its refused requests, want %d", got, held)
	}
	if stored(t, e.pool, "same-address") {
		t.Error("the delivery answered 429 was stored")
	}
	if got := signedFrom(t, e.addr, "127.0.0.3", "", "other-address", body); got != http.StatusAccepted {
		t.Errorf("the same delivery from another address got %d, want 202", got)
	}
	if !stored(t, e.pool, "other-address") {
		t.Error("the delivery from another address was not stored")
	}
	select {
	case got := <-first:
		t.Errorf("the first stalled body was answered %s while it had time", got)
	default:
	}
}

// TestForwardedAddressCountsOnlyBehindATrustedProxy: X-Forwarded-For decides whose bytes a
// request holds only when its peer is a proxy the operator named; there its right-most
// untrusted entry counts, not what a client wrote to its left.
func TestForwardedAddressCountsOnlyBehindATrustedProxy(t *testing.T) {
	t.Parallel()
	stranger := rawRequest{from: "127.0.0.2", id: "stranger", length: 1 << 20, forwarded: "10.0.0.1", body: []byte("{" + strings.Repeat(" ", held-1))}
	body := padded(t, 500<<10)
	signed := func(id, forwarded string) rawRequest {
		return rawRequest{from: "127.0.0.2", id: id, length: len(body), forwarded: forwarded, signature: testkit.SignWebhook(secret, body), body: body}
	}
	cfg := webhook.Config{MaxBytes: 1 << 20, MaxInFlightBytes: 8 << 20, QueueWait: 200 * time.Millisecond, BodyTimeout: time.Minute}

	t.Run("untrusted peer", func(t *testing.T) {
		t.Parallel()
		e := newEdge(t, cfg, control.Config{})
		stall(t, e.addr, stranger)
		waitHeld(t, e.hook, "127.0.0.2", held)
		if got := webhook.HeldBy(e.hook, "10.0.0.1"); got != 0 {
			t.Errorf("the forwarded address of an untrusted peer holds %d bytes, want 0", got)
		}
		if got := answer(t, stall(t, e.addr, signed("claims-another", "10.0.0.9"))); got != "429" {
			t.Errorf("a delivery claiming another forwarded address from the same untrusted peer got %s, want 429", got)
		}
	})

	t.Run("trusted proxy", func(t *testing.T) {
		t.Parallel()
		cfg := cfg
		cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
		e := newEdge(t, cfg, control.Config{})
		stall(t, e.addr, stranger)
		waitHeld(t, e.hook, "10.0.0.1", held)
		if got := webhook.HeldBy(e.hook, "127.0.0.2"); got != 0 {
			t.Errorf("the trusted proxy itself holds %d bytes, want 0", got)
		}
		if got := answer(t, stall(t, e.addr, signed("spoofed", "10.0.0.9, 10.0.0.1"))); got != "429" {
			t.Errorf("the stranger writing another address left of his own got %s, want 429", got)
		}
		if stored(t, e.pool, "spoofed") {
			t.Error("the delivery answered 429 was stored")
		}
		if got := signedFrom(t, e.addr, "127.0.0.2", "10.0.0.9", "other-client", body); got != http.StatusAccepted {
			t.Errorf("another client behind the trusted proxy got %d, want 202", got)
		}
		if !stored(t, e.pool, "other-client") {
			t.Error("the delivery of another client behind the proxy was not stored")
		}
		// From a peer that is not the proxy, the header is the stranger's word only.
		stall(t, e.addr, rawRequest{from: "127.0.0.3", id: "direct", length: 1 << 20, forwarded: "10.0.0.7", body: []byte("{" + strings.Repeat(" ", held-1))})
		waitHeld(t, e.hook, "127.0.0.3", held)
		if got := webhook.HeldBy(e.hook, "10.0.0.7"); got != 0 {
			t.Errorf("a forwarded address from an untrusted peer holds %d bytes, want 0", got)
		}
	})
}

func TestClientAddress(t *testing.T) {
	t.Parallel()
	proxies := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8:1::/48")}
	for _, c := range []struct {
		name, peer string
		forwarded  []string
		want       string
	}{
		{"peer", "203.0.113.5:4000", nil, "203.0.113.5"},
		{"untrusted peer's header is ignored", "203.0.113.5:4000", []string{"198.51.100.1"}, "203.0.113.5"},
		{"trusted proxy without header", "192.0.2.7:4000", nil, "192.0.2.7"},
		{"behind a trusted proxy", "192.0.2.7:4000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"right-most untrusted entry", "192.0.2.7:4000", []string{"1.1.1.1, 198.51.100.1"}, "198.51.100.1"},
		{"chain of trusted proxies", "192.0.2.7:4000", []string{"198.51.100.1, 192.0.2.9", "192.0.2.8"}, "198.51.100.1"},
		{"only proxies", "192.0.2.7:4000", []string{"192.0.2.9"}, "192.0.2.9"},
		{"entry with a port", "192.0.2.7:4000", []string{"198.51.100.1:5555"}, "198.51.100.1"},
		{"unreadable entry stops the walk", "192.0.2.7:4000", []string{"198.51.100.1, garbage, 192.0.2.9"}, "192.0.2.9"},
		{"IPv6 counts by its /64", "[2001:db8:2:3:4:5:6:7]:4000", nil, "2001:db8:2:3::"},
		{"IPv6 behind an IPv6 proxy", "[2001:db8:1::1]:4000", []string{"[2001:db8:9:9:1:2:3:4]"}, "2001:db8:9:9::"},
		{"IPv4-mapped peer", "[::ffff:203.0.113.5]:4000", nil, "203.0.113.5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/webhook", nil)
			r.RemoteAddr = c.peer
			for _, f := range c.forwarded {
				r.Header.Add("X-Forwarded-For", f)
			}
			if got := webhook.ClientAddr(r, proxies); got != c.want {
				t.Errorf("client address %s, want %s", got, c.want)
			}
		})
	}
}

// TestSlowBodyIsCutAtTheDefaultDeadline: a correctly signed delivery whose body comes a
// byte every 200 ms, through the control plane with its own (longer) body deadline, is
// answered 408 by the receiver's default deadline of 10 s and nothing is stored.
func TestSlowBodyIsCutAtTheDefaultDeadline(t *testing.T) {
	t.Parallel()
	e := newEdge(t, webhook.Config{}, control.Config{})
	body := testkit.WebhookPayload(t, "issues", "opened", nil)
	conn, err := dialFrom("127.0.0.2", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	start := time.Now()
	answered := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(conn).ReadString('\n')
		answered <- line
	}()
	q := rawRequest{id: "slow-body", length: len(body), signature: testkit.SignWebhook(secret, body)}
	if _, err := conn.Write([]byte(q.head())); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var line string
	for i := 0; line == ""; {
		select {
		case line = <-answered:
		case <-tick.C:
			if i < len(body) {
				_, _ = conn.Write(body[i : i+1])
				i++
			}
		}
	}
	took := time.Since(start)
	if f := strings.Fields(line); len(f) < 2 || f[1] != "408" {
		t.Errorf("a body slower than the deadline was answered %q, want 408", strings.TrimSpace(line))
	}
	if took < 9*time.Second || took > 13*time.Second {
		t.Errorf("the slow body was answered after %v, want about 10 s", took.Round(time.Millisecond))
	}
	if stored(t, e.pool, "slow-body") {
		t.Error("the slow delivery was stored")
	}
}
