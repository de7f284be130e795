//go:build !unix

package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// fileLock is an exclusive lock file where flock(2) does not exist: the file is created
// with O_EXCL and removed on unlock. A worker killed while holding it leaves it behind;
// `whilly-worker gc` clears locks older than its --max-age.
type fileLock struct {
	f    *os.File
	path string
}

var errLocked = errors.New("locked by another process")

func lockFile(ctx context.Context, path string, wait bool) (*fileLock, error) {
	delay := 20 * time.Millisecond
	for {
		f, err := os.OpenFile(path+".held", os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if err == nil {
			if g, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600); err == nil {
				_ = g.Close()
			}
			return &fileLock{f: f, path: path + ".held"}, nil
		}
		if !errors.Is(err, os.ErrExist) {
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

func (l *fileLock) unlock() error {
	err := l.f.Close()
	if rerr := os.Remove(l.path); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// lockFileMode is lockFile: without flock(2) every lock is exclusive.
func lockFileMode(ctx context.Context, path string, wait, _ bool) (*fileLock, error) {
	return lockFile(ctx, path, wait)
}

// share keeps the lock exclusive: without flock(2) there are no shared locks.
func (l *fileLock) share() error { return nil }

// openNoFollow: nothing to add where O_NOFOLLOW does not exist.
const openNoFollow = 0
