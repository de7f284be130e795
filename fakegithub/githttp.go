package fakegithub

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi" //nolint:gosec // G504 is about Go before 1.6.3 (httpoxy); this serves git to tests and benchmarks only
	"os"
	"path/filepath"
	"sync"
)

// GitHTTP serves the bare repositories under Root over git's smart HTTP protocol: git
// http-backend run as CGI, as a git host answers a clone, a fetch or a push. A request's
// path is a repository's path under Root followed by git's own (/info/refs,
// /git-upload-pack …). It checks no credentials: the fake's routes do that before they
// hand a request to it.
type GitHTTP struct {
	Root string
	// Push lets clients push (git-receive-pack); without it they may only fetch.
	Push bool

	mu      sync.Mutex
	backend string // git-http-backend, found on first use
}

// ServeHTTP serves the repository the request's path names.
func (h *GitHTTP) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if _, err := h.serve(w, req, req.URL.Path); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// serve answers req as if its path were path and returns the status it wrote; an error
// means nothing was written.
func (h *GitHTTP) serve(w http.ResponseWriter, req *http.Request, path string) (int, error) {
	backend, err := h.findBackend(req.Context())
	if err != nil {
		return 0, err
	}
	// CGI refuses chunked bodies: hand it the (small) body whole.
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, "read the request body", http.StatusBadRequest)
		return http.StatusBadRequest, nil //nolint:nilerr // answered: a client's broken body is not the server's error
	}
	cr := req.Clone(req.Context())
	cr.URL.Path = path
	cr.Body, cr.ContentLength, cr.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
	env := []string{"GIT_PROJECT_ROOT=" + h.Root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull}
	if h.Push {
		env = append(env, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.receivepack", "GIT_CONFIG_VALUE_0=true")
	}
	ch := &cgi.Handler{Path: backend, Dir: h.Root, Env: env}
	rec := &statusRecorder{ResponseWriter: w}
	ch.ServeHTTP(rec, cr)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec.status, nil
}

// findBackend returns the path of git-http-backend, asking git where it lives once.
func (h *GitHTTP) findBackend(ctx context.Context) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.backend != "" {
		return h.backend, nil
	}
	out, err := runGit(ctx, h.Root, "--exec-path")
	if err != nil {
		return "", fmt.Errorf("find git http-backend: %w", err)
	}
	h.backend = filepath.Join(out, "git-http-backend")
	return h.backend, nil
}
