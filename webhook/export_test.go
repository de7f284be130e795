package webhook

import (
	"net/http"
	"net/netip"
)

// HeldBy reports the body bytes the receiver holds for client.
func HeldBy(h *Handler, client string) int64 { return h.inFlight.held(netip.MustParseAddr(client)) }

// ClientAddr is the address r's bytes count against, behind the trusted proxies.
func ClientAddr(r *http.Request, trusted []netip.Prefix) string {
	return clientAddr(r, trusted).String()
}
