package webhook

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"sync"
)

// budget counts the body bytes the receiver holds, as they arrive: max in all, and
// perClient for any one client address, so that a stranger who announces a large body
// and sends it slowly holds what he sent, not what he announced, and one address cannot
// take the room every other sender needs.
type budget struct {
	max, perClient int64

	mu      sync.Mutex
	total   int64
	clients map[netip.Addr]int64
	freed   chan struct{} // closed (and replaced) whenever bytes are given back
}

func newBudget(maxBytes, perClient int64) *budget {
	return &budget{max: maxBytes, perClient: perClient, clients: map[netip.Addr]int64{}, freed: make(chan struct{})}
}

var (
	// errBusy: the receiver holds all the bytes it may, and none were freed in time.
	errBusy = errors.New("the webhook receiver holds as many bytes as it may")
	// errClientFull: the client's address holds all the bytes one address may.
	errClientFull = errors.New("the client address holds as many bytes as one address may")
)

// take counts n more bytes for client, waiting until ctx ends for room; it returns
// errClientFull or errBusy when the time is up and there is still none.
func (b *budget) take(ctx context.Context, client netip.Addr, n int64) error {
	for {
		b.mu.Lock()
		held := b.clients[client]
		clientRoom, room := held+n <= b.perClient, b.total+n <= b.max
		if clientRoom && room {
			b.clients[client] = held + n
			b.total += n
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			if !clientRoom {
				return errClientFull
			}
			return errBusy
		}
	}
}

// give returns n bytes of client's.
func (b *budget) give(client netip.Addr, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total -= n
	if left := b.clients[client] - n; left > 0 {
		b.clients[client] = left
	} else {
		delete(b.clients, client)
	}
	close(b.freed)
	b.freed = make(chan struct{})
}

// held reports the bytes client holds.
func (b *budget) held(client netip.Addr) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.clients[client]
}

// clientAddr is the address a request's bytes are counted against: the TCP peer, or,
// when the peer is one of the trusted proxies, the right-most address of
// X-Forwarded-For that is not a trusted proxy itself (the entries to its left are
// whatever the client wrote, so they count for nothing). IPv6 addresses count by their
// /64, which one subscriber usually holds whole.
func clientAddr(r *http.Request, trusted []netip.Prefix) netip.Addr {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{} // no network peer (a test's recorder): one shared address
	}
	addr := peer.Addr().Unmap().WithZone("")
	if isTrusted(addr, trusted) {
		entries := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(entries) - 1; i >= 0; i-- {
			next, ok := parseForwarded(entries[i])
			if !ok {
				break // a proxy wrote something unreadable: count the last address known
			}
			addr = next
			if !isTrusted(addr, trusted) {
				break
			}
		}
	}
	if addr.Is6() {
		p, _ := addr.Prefix(64) // 64 bits always fit an IPv6 address
		return p.Addr()
	}
	return addr
}

// parseForwarded reads one X-Forwarded-For entry: an address, with a port or in brackets
// as some proxies write it.
func parseForwarded(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		ap, perr := netip.ParseAddrPort(s)
		if perr != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	return a.Unmap().WithZone(""), true
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
