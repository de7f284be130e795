//go:build unix

package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// fileLock is an exclusive flock(2) on a file: it keeps two workers on one machine out
// of one workspace at a time, and dies with its process, so a killed worker leaves no
// stale lock behind.
type fileLock struct{ f *os.File }

// errLocked means a non-blocking lock found the file held by someone else.
var errLocked = errors.New("locked by another process")

// lockFile takes the lock on path, creating the file, waiting for it (polling, so that ctx
// can end the wait) unless wait is false, when a held lock is errLocked.
func lockFile(ctx context.Context, path string, wait bool) (*fileLock, error) {
	return lockFileMode(ctx, path, wait, false)
}

// lockFileMode is lockFile, shared with other shared holders when shared.
func lockFileMode(ctx context.Context, path string, wait, shared bool) (*fileLock, error) {
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	delay := 20 * time.Millisecond
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open lock file: %w", err)
		}
		err = syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			// The holder before us may have removed the file (a workspace being deleted):
			// then this lock guards nothing and a new file must be locked instead.
			if same, serr := sameFile(f, path); serr == nil && same {
				return &fileLock{f: f}, nil
			}
			_ = f.Close()
			continue
		}
		_ = f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !wait {
			return nil, errLocked
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("wait for lock %s: %w", path, ctx.Err())
		case <-t.C:
		}
		delay = min(delay*2, time.Second)
	}
}

func sameFile(f *os.File, path string) (bool, error) {
	a, err := f.Stat()
	if err != nil {
		return false, err
	}
	b, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return os.SameFile(a, b), nil
}

// unlock releases the lock (closing the file releases the flock).
func (l *fileLock) unlock() error { return l.f.Close() }

// share turns the exclusive lock into a shared one: others may share it too, while an
// exclusive lock (removal) still waits for every holder.
func (l *fileLock) share() error {
	if err := syscall.Flock(int(l.f.Fd()), syscall.LOCK_SH); err != nil {
		return fmt.Errorf("share lock: %w", err)
	}
	return nil
}

// openNoFollow makes an open fail on a symbolic link rather than follow it.
const openNoFollow = syscall.O_NOFOLLOW
