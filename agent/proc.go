package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"sync"
	"time"
)

// procSpec is one process to run in its own process group.
type procSpec struct {
	path    string // resolved executable
	args    []string
	dir     string
	env     []string
	stdin   *string // nil: /dev/null
	log     io.Writer
	secrets []string // known secret values masked in log
	timeout time.Duration
	grace   time.Duration
	maxOut  int  // stdout tail kept
	merge   bool // stderr shares the stdout pipe, as 2>&1 (verification output)
	// extraFiles are the process's files from descriptor 3 on (the box's seccomp filter).
	extraFiles []*os.File
	// started, when set, is told the process once it has started (the box's limits watch it).
	started func(*os.Process)
}

// procResult is how the process ended. It has no error: a process that started always
// ends in one of these states.
type procResult struct {
	exitCode  int // -1 when killed by a signal
	stdout    []byte
	stderr    []byte
	truncated bool // stdout was longer than maxOut; stdout holds its tail
	timedOut  bool
	cancelled bool
	cause     error // why ctx was cancelled, when cancelled
	duration  time.Duration
}

// runProcess starts s in a new process group and waits for it. When the timeout passes or
// ctx is cancelled it sends SIGTERM to the whole group, then SIGKILL after the grace. When
// the leader exits on its own, whatever it left behind in its group (background jobs that
// would otherwise keep the output pipes open and outlive the attempt) is killed at once,
// and on Linux so is any descendant that left the group with setsid: every process of
// the attempt inherits an environment tag (runTag) that killTagged looks for.
//
// The pipes are os.Pipe files read by our own goroutines rather than exec's copiers, so
// Wait returns when the leader exits even if a grandchild still holds the write end; the
// readers then drain until every holder is gone or the pipes stay silent for the grace.
func runProcess(ctx context.Context, s procSpec) (procResult, error) {
	start := time.Now()
	if s.dir != "" {
		// Checked here so that a missing workspace is not mistaken for a missing binary:
		// exec reports a failed chdir as ENOENT on the executable.
		fi, err := os.Stat(s.dir)
		if err != nil {
			return procResult{}, fmt.Errorf("workspace: %w", err)
		}
		if !fi.IsDir() {
			return procResult{}, fmt.Errorf("workspace %s is not a directory", s.dir)
		}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return procResult{}, fmt.Errorf("create stdout pipe: %w", err)
	}
	// Merged output shares one pipe, so stdout and stderr lines keep their order.
	errR, errW := outR, outW
	if !s.merge {
		if errR, errW, err = os.Pipe(); err != nil {
			closeAll(outR, outW)
			return procResult{}, fmt.Errorf("create stderr pipe: %w", err)
		}
	}
	var inR, inW *os.File
	if s.stdin != nil {
		if inR, inW, err = os.Pipe(); err != nil {
			closeAll(outR, outW, errR, errW)
			return procResult{}, fmt.Errorf("create stdin pipe: %w", err)
		}
	}

	tag := runTag()
	env := append(slices.Clip(s.env), tag)
	var cmd *exec.Cmd
	for try := 1; ; try++ {
		cmd = &exec.Cmd{Path: s.path, Args: append([]string{s.path}, s.args...), Dir: s.dir, Env: env, Stdout: outW, Stderr: errW,
			ExtraFiles: s.extraFiles}
		if inR != nil {
			cmd.Stdin = inR
		}
		setProcessGroup(cmd)
		err = cmd.Start()
		// ETXTBSY: the executable was just written and another fork still holds it open
		// for writing (an agent being upgraded in place, tests writing fake agents).
		if err == nil || !isTextBusy(err) || try == 5 {
			break
		}
		time.Sleep(time.Duration(try) * 10 * time.Millisecond)
	}
	if err != nil {
		closeAll(outR, outW, errR, errW, inR, inW)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, exec.ErrNotFound) {
			return procResult{}, fmt.Errorf("start %s: %w: %w", s.path, ErrNotFound, err)
		}
		return procResult{}, fmt.Errorf("start %s: %w", s.path, err)
	}
	// The child has its copies; ours must go, or the readers never see EOF.
	closeAll(outW, errW, inR)
	if s.started != nil {
		s.started(cmd.Process)
	}
	// If the worker dies now, the watchdog kills the whole group; once the group is
	// gone (below) it is stopped.
	stopWatchdog := startWatchdog(cmd.Process.Pid, tag)

	sink := &logSink{w: s.log, secrets: s.secrets}
	stdout := &tailBuffer{limit: s.maxOut}
	stderr := &tailBuffer{limit: maxStderrBytes}
	outLog, errLog := sink.stream(), sink.stream()
	readersDone := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go pump(&readers, outR, stdout, outLog)
	if !s.merge {
		readers.Add(1)
		go pump(&readers, errR, stderr, errLog)
	}
	go func() { readers.Wait(); close(readersDone) }()
	if inW != nil {
		// A child that never reads a large prompt blocks this write; it ends with EPIPE
		// when the group is gone, or when we close inW below.
		go func() {
			_, _ = io.WriteString(inW, *s.stdin)
			_ = inW.Close()
		}()
	}

	timeout := s.timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	waitDone := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waitDone) }()

	var res procResult
	exited := false
	select {
	case <-waitDone:
		exited = true
	case <-runCtx.Done():
		select {
		case <-waitDone:
			exited = true // it finished just as time ran out: a normal exit
		default:
		}
	}
	if !exited {
		if ctx.Err() != nil {
			res.cancelled, res.cause = true, context.Cause(ctx)
		} else {
			res.timedOut = true
		}
		_ = terminateGroup(cmd.Process)
		grace := time.NewTimer(s.grace)
		select {
		case <-waitDone:
			grace.Stop()
		case <-grace.C:
			_ = killGroup(cmd.Process)
			<-waitDone
		}
	}
	// The leader is gone; nothing else of this attempt may live on, in its group or out.
	_ = killGroup(cmd.Process)
	killTagged(tag)
	stopWatchdog()

	drainPipes(readersDone, s.grace, func() int64 { return stdout.Written() + stderr.Written() }, outR, errR)
	closeAll(outR, errR, inW)
	outLog.flush()
	errLog.flush()

	res.exitCode = cmd.ProcessState.ExitCode()
	res.stdout = stdout.Bytes()
	res.truncated = stdout.Truncated()
	res.stderr = stderr.Bytes()
	res.duration = time.Since(start)
	return res, nil
}

// runTag is an environment variable unique to one run, which every descendant inherits:
// killTagged finds by it those that left the process group.
func runTag() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	return "WHILLY_AGENT_RUN=" + hex.EncodeToString(b[:])
}

func pump(wg *sync.WaitGroup, r io.Reader, buf *tailBuffer, log *lineRedactor) {
	defer wg.Done()
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			_, _ = buf.Write(chunk[:n])
			log.write(chunk[:n])
		}
		if err != nil {
			return
		}
	}
}

// drainFor bounds how long the output pipes are read after the attempt's processes are
// gone, while output still flows: twenty kill graces, 30 s at most. A process that hid
// from the kill and writes for ever holds the attempt no longer.
func drainFor(grace time.Duration) time.Duration { return min(20*grace, 30*time.Second) }

// drainPipes waits for the readers to reach the end of the pipes. Someone who left the
// group (setsid) may still hold a pipe open: once no byte has arrived for the grace, it
// stops reading, and after drainFor(grace) whatever flows. Output still flowing (a slow log
// writer behind the reader) is read to the end, so the result line at the tail is not
// cut off.
func drainPipes(done <-chan struct{}, grace time.Duration, read func() int64, pipes ...*os.File) {
	t := time.NewTicker(grace)
	defer t.Stop()
	deadline := time.Now().Add(drainFor(grace))
	last := read()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if n := read(); n != last && time.Now().Before(deadline) {
				last = n
				continue
			}
			closeAll(pipes...)
			<-done
			return
		}
	}
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close()
		}
	}
}

// tailBuffer keeps the last limit bytes written to it. It grows to twice limit before it
// compacts, so writes cost amortised O(len(p)).
type tailBuffer struct {
	mu    sync.Mutex
	limit int
	buf   []byte
	total int64
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += int64(len(p))
	if len(p) >= b.limit {
		b.buf = append(b.buf[:0], p[len(p)-b.limit:]...)
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	if len(b.buf) > 2*b.limit {
		n := copy(b.buf, b.buf[len(b.buf)-b.limit:])
		b.buf = b.buf[:n]
	}
	return len(p), nil
}

// Bytes returns a copy of the kept tail.
func (b *tailBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) > b.limit {
		return bytes.Clone(b.buf[len(b.buf)-b.limit:])
	}
	return bytes.Clone(b.buf)
}

// Written returns how many bytes were written in all.
func (b *tailBuffer) Written() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Truncated reports whether more was written than is kept.
func (b *tailBuffer) Truncated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total > int64(b.limit)
}

// logSink serialises the output streams into Request.Log. A failing writer is dropped
// after its first error: the log must never fail or block the attempt's bookkeeping.
type logSink struct {
	mu      sync.Mutex
	w       io.Writer
	secrets []string // masked on top of Redact (Request.Secrets)
	failed  bool
}

func (l *logSink) write(p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w == nil || l.failed {
		return
	}
	if _, err := l.w.Write(p); err != nil {
		l.failed = true
	}
}

func (l *logSink) stream() *lineRedactor { return &lineRedactor{sink: l} }

// maxLogLine bounds how much of a line without a newline is held back before it is
// redacted and written anyway.
const maxLogLine = 256 << 10

// lineRedactor redacts one output stream line by line before it reaches the log. It also
// follows PEM private-key blocks across lines, which a per-line regexp cannot see whole.
type lineRedactor struct {
	sink    *logSink
	pending []byte
	inKey   bool
}

func (r *lineRedactor) write(p []byte) {
	if r.sink.w == nil {
		return
	}
	r.pending = append(r.pending, p...)
	for {
		i := bytes.IndexByte(r.pending, '\n')
		if i < 0 {
			break
		}
		r.emit(r.pending[:i+1])
		r.pending = r.pending[i+1:]
	}
	if len(r.pending) > maxLogLine {
		r.emit(r.pending)
		r.pending = r.pending[:0]
	}
	// Keep the backing array from creeping forward forever.
	if cap(r.pending) > 2*maxLogLine {
		r.pending = append([]byte(nil), r.pending...)
	}
}

func (r *lineRedactor) flush() {
	if len(r.pending) > 0 {
		r.emit(r.pending)
		r.pending = nil
	}
}

func (r *lineRedactor) emit(line []byte) {
	s := maskValues(string(line), r.sink.secrets)
	if r.inKey {
		loc := pemEnd().FindStringIndex(s)
		if loc == nil {
			return // inside a key block: nothing of it reaches the log
		}
		r.inKey = false
		s = s[loc[1]:]
	}
	if locs := pemBegin().FindAllStringIndex(s, -1); locs != nil && !pemEnd().MatchString(s[locs[len(locs)-1][1]:]) {
		loc := locs[len(locs)-1]
		// A block that begins here and ends on a later line.
		r.inKey = true
		s = Redact(s[:loc[0]]) + redactedKey + trailingNewline(s)
	} else {
		s = Redact(s)
	}
	r.sink.write([]byte(s))
}

func trailingNewline(s string) string {
	if len(s) > 0 && s[len(s)-1] == '\n' {
		return "\n"
	}
	return ""
}
