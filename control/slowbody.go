package control

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
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
// holding a connection, a goroutine and what it sent so far for as long as it likes. The
// deadline is lifted once the body has been read to its end, because net/http then reads
// the connection in the background to notice a client going away, and a deadline passing
// there would cancel long-polling claims. Requests without a body are left alone (their
// headers are bounded by ReadHeaderTimeout), which covers the event stream.
func (s *Server) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout)); err != nil {
			next.ServeHTTP(w, r) // not a network connection (a test's recorder)
			return
		}
		r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline when the body reaches its end.
type deadlineBody struct {
	io.ReadCloser
	lift func()
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.lift)
	}
	return n, err
}

// IsBodyTimeout reports whether err is a request body read cut off by its deadline.
func IsBodyTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
