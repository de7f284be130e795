// Package webhook is whilly's GitHub webhook receiver (POST /webhook): it caps the body,
// verifies X-Hub-Signature-256 in constant time before reading anything else, stores the
// delivery keyed by X-GitHub-Delivery and enqueues its River job in the same
// transaction, and answers 202 — all in a few milliseconds. Processing happens in the
// job (package intake). A repeated delivery id is acknowledged and ignored; events whilly
// does not handle are acknowledged and dropped.
//
// A body is read before its signature can be checked, so its sender may be anyone: the
// bytes of bodies being read and stored are counted as they arrive, bounded in all
// (Config.MaxInFlightBytes) and for any one client address (Config.MaxClientBytes), and a
// body must arrive whole within Config.BodyTimeout. A stranger who announces a large body
// and sends it slowly holds what he sent, for seconds, and cannot crowd out GitHub.
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
	"net/netip"
	"os"
	"strings"
	"sync"
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
	// MaxInFlightBytes bounds the bytes of bodies being read and stored at once; a
	// delivery that finds no room within QueueWait is answered 503 (the reconciler has
	// GitHub redeliver it). Default twice MaxBytes. A delivery counts the bytes it has
	// sent so far, not the length it announced.
	MaxInFlightBytes int64
	// MaxClientBytes bounds the bytes one client address holds at once (an IPv6 address
	// counts by its /64); a delivery that finds no room within QueueWait is answered 429.
	// Default MaxBytes, at most MaxInFlightBytes.
	MaxClientBytes int64
	// TrustedProxies are the reverse proxies in front of the receiver
	// (WHILLY_TRUSTED_PROXIES): a request from one of them counts against the right-most
	// address of X-Forwarded-For that is not one of them. From any other peer,
	// X-Forwarded-For is ignored.
	TrustedProxies []netip.Prefix
	// QueueWait is how long a delivery waits for room; default 5 s.
	QueueWait time.Duration
	// BodyTimeout is the time a body has to arrive whole, from the end of its headers;
	// a slower one is answered 408 and nothing is stored. It replaces the read deadline
	// the server set. Default 10 s (GitHub sends a delivery within a second).
	BodyTimeout time.Duration
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
	// inFlight counts the body bytes held: slow or large bodies cannot add up to more
	// memory than MaxInFlightBytes, however many connections send them.
	inFlight *budget

	badSig struct {
		sync.Mutex
		last       time.Time
		suppressed int
	}
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
	if cfg.MaxInFlightBytes < cfg.MaxBytes {
		cfg.MaxInFlightBytes = 2 * cfg.MaxBytes
	}
	if cfg.MaxClientBytes <= 0 {
		cfg.MaxClientBytes = cfg.MaxBytes
	}
	cfg.MaxClientBytes = min(cfg.MaxClientBytes, cfg.MaxInFlightBytes)
	if cfg.QueueWait <= 0 {
		cfg.QueueWait = 5 * time.Second
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = 10 * time.Second
	}
	h := &Handler{store: store, enqueue: enqueue, log: log, cfg: cfg, events: map[string]bool{},
		inFlight: newBudget(cfg.MaxInFlightBytes, cfg.MaxClientBytes)}
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
	deadline := time.Now().Add(h.cfg.BodyTimeout)
	// An error means no network connection underneath (a test's recorder).
	_ = http.NewResponseController(w).SetReadDeadline(deadline)
	client := clientAddr(r, h.cfg.TrustedProxies)
	body, counted, err := h.readBody(r.Context(), http.MaxBytesReader(w, r.Body, h.cfg.MaxBytes), client, deadline)
	defer h.inFlight.give(client, counted)
	if err != nil {
		// The rest of the body is not read: the connection is closed after the answer.
		w.Header().Set("Connection", "close")
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			reply(w, http.StatusRequestEntityTooLarge, Outcome{"too_large", "The body is larger than the limit."})
		case errors.Is(err, os.ErrDeadlineExceeded):
			reply(w, http.StatusRequestTimeout, Outcome{"body_timeout", "The body did not arrive in time."})
		case errors.Is(err, errClientFull):
			w.Header().Set("Retry-After", "10")
			reply(w, http.StatusTooManyRequests, Outcome{"client_busy", "This address is sending too many bytes at once."})
		case errors.Is(err, errBusy):
			reply(w, http.StatusServiceUnavailable, Outcome{"busy", "Too many deliveries are being received at once; it will be redelivered."})
		default:
			reply(w, http.StatusBadRequest, Outcome{"bad_request", "The body could not be read."})
		}
		return
	}
	if !h.verify(r.Header.Get("X-Hub-Signature-256"), body) {
		h.warnBadSignature(r)
		reply(w, http.StatusUnauthorized, Outcome{"bad_signature", "X-Hub-Signature-256 is missing or does not match."})
		return
	}
	event, id := r.Header.Get("X-GitHub-Event"), r.Header.Get("X-GitHub-Delivery")
	status, out := h.Receive(r.Context(), SourcePush, id, event, body)
	reply(w, status, out)
}

// Blocks of a body being read: the first is minBlock, each next one a quarter of what
// arrived so far, up to maxBlock. Blocks are never copied while the body arrives, so the
// memory of a body is what it sent, a quarter more and one small block; it is joined once,
// at its end.
const (
	minBlock = 4 << 10
	maxBlock = 1 << 20
)

// readBody reads body, counting each read against client in the receiver's budget once
// it has arrived; it waits at most QueueWait for room each time, and never past deadline.
// It returns the bytes counted even on error: the caller gives them back when done.
func (h *Handler) readBody(ctx context.Context, body io.Reader, client netip.Addr, deadline time.Time) ([]byte, int64, error) {
	var (
		blocks [][]byte
		block  []byte
		total  int64
	)
	for {
		if len(block) == cap(block) {
			if len(block) > 0 {
				blocks = append(blocks, block)
			}
			block = make([]byte, 0, min(max(total/4, minBlock), maxBlock))
		}
		n, err := body.Read(block[len(block):cap(block)])
		if n > 0 {
			until := time.Now().Add(h.cfg.QueueWait)
			if deadline.Before(until) {
				until = deadline
			}
			wait, cancel := context.WithDeadline(ctx, until)
			took := h.inFlight.take(wait, client, int64(n))
			cancel()
			if took != nil {
				return nil, total, took
			}
			block, total = block[:len(block)+n], total+int64(n)
		}
		if errors.Is(err, io.EOF) {
			if len(blocks) == 0 {
				return block, total, nil
			}
			return bytes.Join(append(blocks, block), nil), total, nil
		}
		if err != nil {
			return nil, total, fmt.Errorf("read the webhook body: %w", err)
		}
	}
}

// Sources of a delivery, in the log line of each.
const (
	SourcePush = "push" // POST /webhook
	SourcePull = "pull" // the App's delivery log (WHILLY_GITHUB_DELIVERIES=pull)
)

// Receive checks and stores a delivery whose origin is established (a verified
// signature, or the App's own delivery log read with its JWT), enqueueing its job in the
// same transaction. It returns the HTTP status and outcome the webhook answers, and logs
// every delivery at INFO with its id, event and outcome. Both POST /webhook and pull mode
// go through it.
func (h *Handler) Receive(ctx context.Context, source, id, event string, body []byte) (int, Outcome) {
	status, out, action, inst := h.receive(ctx, id, event, body)
	h.log.InfoContext(ctx, "webhook delivery", "delivery_id", limit(id), "event", limit(event), "action", action,
		"installation_id", inst, "outcome", out.Status, "source", source)
	return status, out
}

func (h *Handler) receive(ctx context.Context, id, event string, body []byte) (status int, out Outcome, action string, inst int64) {
	if int64(len(body)) > h.cfg.MaxBytes {
		return http.StatusRequestEntityTooLarge, Outcome{"too_large", "The body is larger than the limit."}, "", 0
	}
	if event == "" || id == "" || len(id) > 200 || len(event) > 100 {
		return http.StatusBadRequest, Outcome{"bad_request", "X-GitHub-Event and X-GitHub-Delivery are required."}, "", 0
	}
	if !h.events[event] {
		return http.StatusAccepted, Outcome{"ignored", "whilly does not handle this event."}, "", 0
	}
	var head struct {
		Action       string `json:"action"`
		Installation struct {
			ID int64 `json:"id"`
		} `json:"installation"`
	}
	if err := json.Unmarshal(body, &head); err != nil || !isObject(body) {
		return http.StatusBadRequest, Outcome{"bad_request", "The body is not a JSON object."}, "", 0
	}
	if !utf8.Valid(body) {
		return http.StatusBadRequest, Outcome{"bad_request", "The body is not UTF-8."}, "", 0
	}
	action, inst = limit(head.Action), head.Installation.ID
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	d := queue.Delivery{ID: id, Event: event, Action: head.Action, InstallationID: head.Installation.ID, Payload: body}
	stored, err := h.store.RecordDelivery(ctx, d, func(ctx context.Context, tx pgx.Tx) error { return h.enqueue(ctx, tx, id) })
	if errors.Is(err, queue.ErrInvalid) {
		// Postgres' jsonb refuses \u0000 and lone surrogates: it could never be processed.
		return http.StatusBadRequest, Outcome{"bad_request", "The body holds a NUL character or a lone surrogate."}, action, inst
	}
	if err != nil {
		// GitHub does not retry on its own; the reconciler redelivers failed deliveries.
		h.log.ErrorContext(ctx, "store webhook delivery", "delivery_id", id, "event", event, "error", err)
		return http.StatusServiceUnavailable, Outcome{"unavailable", "The delivery could not be stored; it will be redelivered."}, action, inst
	}
	if !stored {
		return http.StatusAccepted, Outcome{"duplicate", "This delivery was already received."}, action, inst
	}
	return http.StatusAccepted, Outcome{Status: "queued"}, action, inst
}

// limit keeps a header value an attacker chose short in the log.
func limit(s string) string {
	if len(s) <= 100 {
		return s
	}
	return s[:100] + "…"
}

// badSignatureEvery is how often at most a bad signature is logged; the ones in between
// are counted into the next line, so a flood of forged requests cannot flood the log.
const badSignatureEvery = 10 * time.Second

// warnBadSignature logs a refused signature at WARN, at most once per badSignatureEvery.
func (h *Handler) warnBadSignature(r *http.Request) {
	h.badSig.Lock()
	now := time.Now()
	if now.Sub(h.badSig.last) < badSignatureEvery {
		h.badSig.suppressed++
		h.badSig.Unlock()
		return
	}
	suppressed := h.badSig.suppressed
	h.badSig.last, h.badSig.suppressed = now, 0
	h.badSig.Unlock()
	h.log.WarnContext(r.Context(), "webhook signature refused", "delivery_id", limit(r.Header.Get("X-GitHub-Delivery")),
		"event", limit(r.Header.Get("X-GitHub-Event")), "remote_addr", r.RemoteAddr,
		"signature_present", r.Header.Get("X-Hub-Signature-256") != "", "suppressed_since_last", suppressed)
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

// reply answers a delivery: {"status", "message"} when it was taken (2xx), and like
// every other error of whilly's HTTP API, {"error", "message"}, when it was not.
func reply(w http.ResponseWriter, status int, o Outcome) {
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5")
	}
	w.WriteHeader(status)
	var body any = o
	if status >= 400 {
		body = errorBody{Error: o.Status, Message: o.Message}
	}
	if err := json.NewEncoder(w).Encode(body); err != nil {
		return // the client went away; nothing to do
	}
}

// errorBody is the body of an error answer (control/client.ErrorBody's shape).
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// String describes the config without the secret.
func (c Config) String() string {
	return fmt.Sprintf("webhook{events=%v max_bytes=%d secret=[redacted]}", c.Events, c.MaxBytes)
}

// NotConfigured answers POST /webhook while the GitHub App is not configured: 503 and
// a body naming what is missing, so a delivery GitHub sends too early is visibly failed
// (and redelivered later) rather than a 404 that reads like a wrong URL.
func NotConfigured(missing []string) http.Handler {
	msg := "The GitHub App is not configured on this server: set " + strings.Join(missing, ", ") +
		" (or run `whilly app create`) and restart whilly serve."
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "app_not_configured", "message": msg}) // the client went away
	})
}
