package control

import (
	"errors"
	"net/http"
	"os"
	"time"
)

// HTTPServer returns the http.Server to serve the API with: the request line and headers
// must arrive within ReadHeaderTimeout, and idle keep-alive connections are closed after
// IdleTimeout. Bodies have their own deadline (Config.BodyTimeout, bodyDeadline); there is
// no WriteTimeout, since claims long-poll and event streams last.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// bodyDeadline bounds the time a request's body may take to arrive (Config.BodyTimeout):
// a client that dribbles its body, or stops sending it, is cut off when the time is up —
// the handler's read fails, it answers 408 and the connection is closed — instead of
// holding a connection, a goroutine and what it sent so far for as long as it likes.
// Long-polling claims are not cut: once a body has been read to its end, net/http clears
// the read deadline itself before it watches the connection for the client going away.
// Requests without a body are left alone (their headers are bounded by
// ReadHeaderTimeout), which covers the event stream.
func (s *Server) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			// An error means no network connection underneath (a test's recorder).
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
		}
		next.ServeHTTP(w, r)
	})
}

// IsBodyTimeout reports whether err is a request body read cut off by its deadline.
func IsBodyTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
