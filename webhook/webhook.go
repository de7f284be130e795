// Package webhook is whilly's GitHub webhook receiver (POST /webhook): it caps the body,
// verifies X-Hub-Signature-256 in constant time before reading anything else, stores the
// delivery keyed by X-GitHub-Delivery and enqueues its River job in the same
// transaction, and answers 202 — all in a few milliseconds. Processing happens in the
// job (package intake). A repeated delivery id is acknowledged and ignored; events whilly
// does not handle are acknowledged and dropped.
//
// It imports queue and pgx only; it must not import intake, app, go-github, control or
// cli, and it never logs payloads or secrets.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/queue"
)

// DefaultMaxBytes is GitHub's own cap on a webhook payload: 25 MB.
const DefaultMaxBytes = 25 << 20

// Config configures the receiver.
type Config struct {
	// Secret is the webhook secret (WHILLY_GITHUB_WEBHOOK_SECRET); required.
	Secret []byte
	// Events are the X-GitHub-Event values whilly handles; others are dropped.
	Events []string
	// MaxBytes caps the body; default DefaultMaxBytes.
	MaxBytes int64
	// Timeout bounds storing a delivery; default 10 s.
	Timeout time.Duration
}

// Enqueue inserts the delivery's job inside the transaction that stores it.
type Enqueue func(ctx context.Context, tx pgx.Tx, deliveryID string) error

// Handler is the webhook endpoint.
type Handler struct {
	store   *queue.Store
	enqueue Enqueue
	log     *slog.Logger
	cfg     Config
	events  map[string]bool
}

// ErrNoSecret: the receiver refuses to run without a webhook secret (Atlantis' optional
// secret is the counter-example).
var ErrNoSecret = errors.New("the webhook secret is not set (WHILLY_GITHUB_WEBHOOK_SECRET)")

// New returns the handler; it refuses to exist without a secret.
func New(store *queue.Store, enqueue Enqueue, log *slog.Logger, cfg Config) (*Handler, error) {
	if len(cfg.Secret) == 0 {
		return nil, ErrNoSecret
	}
	if enqueue == nil {
		return nil, errors.New("new webhook handler: an enqueue function is required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	h := &Handler{store: store, enqueue: enqueue, log: log, cfg: cfg, events: map[string]bool{}}
	for _, e := range cfg.Events {
		h.events[e] = true
	}
	return h, nil
}

// Outcome is the receiver's answer, in the JSON body of every response.
type Outcome struct {
	Status  string `json:"status"` // queued, duplicate, ignored, or an error code
	Message string `json:"message,omitempty"`
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		reply(w, http.StatusMethodNotAllowed, Outcome{"method_not_allowed", "Webhooks are POSTed."})
		return
	}
	if r.ContentLength > h.cfg.MaxBytes {
		reply(w, http.StatusRequestEntityTooLarge, Outcome{"too_large", "The body is larger than the limit."})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			reply(w, http.StatusRequestEntityTooLarge, Outcome{"too_large", "The body is larger than the limit."})
			return
		}
		reply(w, http.StatusBadRequest, Outcome{"bad_request", "The body could not be read."})
		return
	}
	if !h.verify(r.Header.Get("X-Hub-Signature-256"), body) {
		reply(w, http.StatusUnauthorized, Outcome{"bad_signature", "X-Hub-Signature-256 is missing or does not match."})
		return
	}
	event, id := r.Header.Get("X-GitHub-Event"), r.Header.Get("X-GitHub-Delivery")
	if event == "" || id == "" || len(id) > 200 || len(event) > 100 {
		reply(w, http.StatusBadRequest, Outcome{"bad_request", "X-GitHub-Event and X-GitHub-Delivery are required."})
		return
	}
	if !h.events[event] {
		reply(w, http.StatusAccepted, Outcome{"ignored", "whilly does not handle this event."})
		return
	}
	var head struct {
		Action       string `json:"action"`
		Installation struct {
			ID int64 `json:"id"`
		} `json:"installation"`
	}
	if err := json.Unmarshal(body, &head); err != nil || !isObject(body) {
		reply(w, http.StatusBadRequest, Outcome{"bad_request", "The body is not a JSON object."})
		return
	}
	if !utf8.Valid(body) {
		reply(w, http.StatusBadRequest, Outcome{"bad_request", "The body is not UTF-8."})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	d := queue.Delivery{ID: id, Event: event, Action: head.Action, InstallationID: head.Installation.ID, Payload: body}
	stored, err := h.store.RecordDelivery(ctx, d, func(ctx context.Context, tx pgx.Tx) error { return h.enqueue(ctx, tx, id) })
	if errors.Is(err, queue.ErrInvalid) {
		// Postgres' jsonb refuses \u0000 and lone surrogates: it could never be processed.
		reply(w, http.StatusBadRequest, Outcome{"bad_request", "The body holds a NUL character or a lone surrogate."})
		return
	}
	if err != nil {
		// GitHub does not retry on its own; the reconciler redelivers failed deliveries.
		h.log.ErrorContext(ctx, "store webhook delivery", "delivery_id", id, "event", event, "error", err)
		reply(w, http.StatusServiceUnavailable, Outcome{"unavailable", "The delivery could not be stored; it will be redelivered."})
		return
	}
	if !stored {
		reply(w, http.StatusAccepted, Outcome{"duplicate", "This delivery was already received."})
		return
	}
	h.log.DebugContext(ctx, "webhook delivery queued", "delivery_id", id, "event", event, "action", head.Action,
		"installation_id", head.Installation.ID)
	reply(w, http.StatusAccepted, Outcome{Status: "queued"})
}

// verify checks the HMAC-SHA256 signature in constant time.
func (h *Handler) verify(header string, body []byte) bool {
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return false
	}
	mac := hmac.New(sha256.New, h.cfg.Secret)
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

func isObject(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}

func reply(w http.ResponseWriter, status int, o Outcome) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(o); err != nil {
		return // the client went away; nothing to do
	}
}

// String describes the config without the secret.
func (c Config) String() string {
	return fmt.Sprintf("webhook{events=%v max_bytes=%d secret=[redacted]}", c.Events, c.MaxBytes)
}
