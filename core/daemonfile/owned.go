package daemonfile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/wcache/wcache/internal/defaults"
)

// A daemon's socket and ready file live in a directory that can vanish
// under it (logind removes /run/user/UID at logout) and be recreated, after
// which a second daemon may start on the same device and create files at the
// same paths. So the daemon records each file it creates by device and inode
// (Lock.Own), removes only files that are still those (Lock.RemoveOwned),
// and watches them and its lock file (Lock.Watch): once one is gone or
// replaced, its identity lock no longer guards the device and clients can
// no longer reach it, and it should stop.

// fileID identifies a file across renames and replacements.
type fileID struct{ dev, ino uint64 }

func idOf(fi fs.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, true
}

// lstatID is the identity of the file now at path (not following a
// symlink); ok is false when there is none.
func lstatID(path string) (fileID, bool) {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileID{}, false
	}
	return idOf(fi)
}

// ErrFileLost is wrapped by the error a daemon reports when Watch found one
// of its files gone or replaced.
var ErrFileLost = errors.New("a daemon file was removed or replaced")

// Own records the file now at path (the socket after listening, the ready
// file after writing it) as created by this daemon.
func (l *Lock) Own(path string) error {
	id, ok := lstatID(path)
	if !ok {
		return fmt.Errorf("record daemon file %s: it does not exist", path)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.owned == nil {
		l.owned = make(map[string]fileID)
	}
	l.owned[path] = id
	return nil
}

// Replace runs write, which replaces the owned file at path with a new one
// (the ready file rewritten after a publish or an evict), and records the
// new file as owned. Lost, and so Watch, never sees the file in between as
// lost. When write fails, the record is left as it was.
func (l *Lock) Replace(path string, write func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := write(); err != nil {
		return err
	}
	id, ok := lstatID(path)
	if !ok {
		return fmt.Errorf("record daemon file %s: it does not exist", path)
	}
	if l.owned == nil {
		l.owned = make(map[string]fileID)
	}
	l.owned[path] = id
	return nil
}

// RemoveOwned removes each file recorded by Own that is still the same file
// (same device and inode). A file that is gone, or was replaced by someone
// else's (a second daemon after the directory was removed and recreated), is
// left alone. It does not touch the lock file.
func (l *Lock) RemoveOwned() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for path, id := range l.owned {
		if now, ok := lstatID(path); !ok || now != id {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove daemon files: %w", err)
	}
	return nil
}

// Lost returns the first of the lock file and the files recorded by Own
// that is no longer at its path as the same file, and false when all are
// in place.
func (l *Lock) Lost() (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		if now, ok := lstatID(l.path); !ok || now != l.id {
			return l.path, true
		}
	}
	for path, id := range l.owned {
		if now, ok := lstatID(path); !ok || now != id {
			return path, true
		}
	}
	return "", false
}

// Watch checks Lost every interval (1s when interval <= 0) until ctx ends.
// The returned channel receives an error wrapping ErrFileLost, naming the
// file, once one is lost; it is closed when Watch stops.
func (l *Lock) Watch(ctx context.Context, interval time.Duration) <-chan error {
	defaults.Positive(&interval, time.Second)
	out := make(chan error, 1)
	go func() {
		defer close(out)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if path, lost := l.Lost(); lost {
				out <- fmt.Errorf("%s: %w (its directory was removed, or another process replaced it): "+
					"this daemon no longer owns its device", path, ErrFileLost)
				return
			}
		}
	}()
	return out
}
