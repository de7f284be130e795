package worker

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
)

// Log streaming: what the agent prints (redacted by package agent, line by line) is
// uploaded to the control plane while it runs, to the attempt the lease holds.
const (
	// logPending bounds the bytes waiting to be uploaded: when the agent writes faster
	// than they go, the oldest are dropped (the stored log gets a gap) and the agent
	// never waits. The control plane keeps the last 1 MiB anyway.
	logPending = 1 << 20
	// logEvery is how often what is pending is sent; logChunk (or more) pending is sent
	// at once.
	logEvery = time.Second
	logChunk = client.MaxLogChunk
	// logGap is the least time between two uploads while the agent runs: at most
	// logChunk/logGap (256 KiB/s) per attempt reaches the control plane, whatever the
	// agent writes.
	logGap = 250 * time.Millisecond
	// logFinalFor bounds the last upload, after the agent ended and before the report.
	logFinalFor = 5 * time.Second
)

// logStream is the io.Writer an attempt's agent logs into; run uploads what it
// received. Write never blocks on the network.
type logStream struct {
	api     *client.Client
	log     *slog.Logger
	planID  string
	taskID  string
	attempt int
	leaseID string

	mu      sync.Mutex
	pending []byte // bytes [off, off+len(pending)) of the log, not yet uploaded
	off     int64
	dropped int64 // bytes dropped because pending was full
	stopped bool  // the control plane refused the log: stop sending
	// unsure is the length of a chunk sent at off whose answer never came: the control
	// plane may have stored it, so exactly that chunk goes again (a duplicate if it was
	// stored), never a longer one at the same offset, which would overlap (409).
	unsure int

	wake chan struct{}
}

func newLogStream(api *client.Client, log *slog.Logger, c *client.Claim) *logStream {
	return &logStream{api: api, log: log, planID: c.Task.PlanID, taskID: c.Task.ID, attempt: c.Task.Attempt,
		leaseID: c.Lease.ID, wake: make(chan struct{}, 1)}
}

// Write queues p for upload. It takes what the agent printed, made storable (no NUL, valid
// UTF-8) so that the offsets the worker counts are the control plane's; it drops the
// oldest pending bytes, from a character's start, when more than logPending wait.
func (s *logStream) Write(p []byte) (int, error) {
	clean, _ := agent.Storable(string(p))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return len(p), nil
	}
	s.pending = append(s.pending, clean...)
	if over := len(s.pending) - logPending; over > 0 {
		for over < len(s.pending) && !utf8.RuneStart(s.pending[over]) {
			over++
		}
		s.dropped += int64(over)
		s.off += int64(over)
		s.unsure = 0 // the unsure chunk's bytes are gone: what follows starts past it
		s.pending = append(s.pending[:0], s.pending[over:]...)
	}
	if len(s.pending) >= logChunk {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// run uploads what is pending every logEvery, or as soon as a chunk's worth is, at most
// one upload per logGap, until ctx ends. Call finish after it returned.
func (s *logStream) run(ctx context.Context) {
	tick := time.NewTicker(logEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.wake:
		}
		for s.upload(ctx) && s.pendingBytes() >= logChunk {
			t := time.NewTimer(logGap)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// finish uploads what is still pending once the agent has ended, before the attempt is
// released: a follower sees the whole log before the attempt ends. Nil does nothing.
func (s *logStream) finish(ctx context.Context) {
	if s != nil {
		s.drain(ctx, 0)
	}
}

// tail ends the stream before the report that ends the attempt (COMPLETE or FAIL): what
// one chunk cannot hold is uploaded on its own, and the rest, at most one chunk, is
// returned for the report to carry and store in its transaction, which saves a request
// and a transaction per attempt. The report carries it again when it is sent again, and
// the control plane stores no byte twice. Nil, or nothing left, is nil.
func (s *logStream) tail(ctx context.Context) *client.LogTail {
	if s == nil {
		return nil
	}
	s.drain(ctx, logChunk)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || len(s.pending) == 0 {
		return nil
	}
	n := min(len(s.pending), logChunk)
	for n < len(s.pending) && n > 0 && !utf8.RuneStart(s.pending[n]) {
		n-- // the control plane could not be reached: the rest is lost with it
	}
	return &client.LogTail{Offset: s.off, Text: string(s.pending[:n])}
}

// drain uploads what is pending, after the agent ended, until at most keep bytes are.
func (s *logStream) drain(ctx context.Context, keep int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), logFinalFor)
	defer cancel()
	for s.pendingBytes() > keep && s.upload(ctx) {
	}
	s.mu.Lock()
	dropped := s.dropped
	s.mu.Unlock()
	if dropped > 0 {
		s.log.InfoContext(ctx, "the agent wrote faster than its log is uploaded; the oldest bytes were dropped", "bytes_dropped", dropped)
	}
}

func (s *logStream) pendingBytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return 0
	}
	return len(s.pending)
}

// upload sends one chunk of what is pending and reports whether it went through. A
// refusal (the lease ended, or a bad request) stops the stream; an unreachable control
// plane keeps the bytes for the next try.
func (s *logStream) upload(ctx context.Context) bool {
	s.mu.Lock()
	if s.stopped || len(s.pending) == 0 {
		s.mu.Unlock()
		return false
	}
	n := min(len(s.pending), logChunk)
	for n < len(s.pending) && n > 0 && !utf8.RuneStart(s.pending[n]) {
		n-- // never cut a character in two: the text must stay valid UTF-8
	}
	if s.unsure > 0 && s.unsure <= len(s.pending) {
		n = s.unsure
	}
	off, text := s.off, string(s.pending[:n])
	s.mu.Unlock()

	_, err := s.api.AppendLog(ctx, s.planID, s.taskID, s.attempt, client.LogChunkRequest{LeaseID: s.leaseID, Offset: off, Text: text})
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if !client.IsRetryable(err) {
			s.stopped, s.pending = true, nil
			s.log.WarnContext(ctx, "the control plane refused the attempt's log; no more of it is sent", "error", err)
		} else if off == s.off {
			s.unsure = n
		}
		return false
	}
	s.unsure = 0
	// Bytes dropped meanwhile may have moved the window past what was sent.
	if sent := off + int64(n); sent > s.off {
		s.pending = append(s.pending[:0], s.pending[sent-s.off:]...)
		s.off = sent
	}
	return true
}

// fanOut writes to each writer; one that fails is left out from then on, without failing
// the others (the local log file must not stop the upload, nor the reverse).
type fanOut struct {
	ws     []io.Writer
	failed []bool
}

func newFanOut(ws ...io.Writer) io.Writer {
	var live []io.Writer
	for _, w := range ws {
		if w != nil {
			live = append(live, w)
		}
	}
	return &fanOut{ws: live, failed: make([]bool, len(live))}
}

func (f *fanOut) Write(p []byte) (int, error) {
	for i, w := range f.ws {
		if !f.failed[i] {
			if _, err := w.Write(p); err != nil {
				f.failed[i] = true
			}
		}
	}
	return len(p), nil
}
