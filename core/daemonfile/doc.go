// Package daemonfile manages a wcache daemon's on-disk identity: the ready
// file that announces it, the flock-based identity lock that makes it the
// only daemon of its device, and the cleanup of files left by daemons that
// are gone.
//
// Liveness has two signals. The primary one is the identity lock: an
// flock(LOCK_EX) on the per-device lock file (paths.Paths.Lock) that the
// daemon takes before anything else and holds for its whole life, with its
// pid and process start time written into the file. A held lock means a live
// daemon even before its ready file exists. The secondary signal is the ready
// file's pid and start time (field 22 of /proc/<pid>/stat), which catches a
// live daemon whose lock file was deleted and recreated under it.
//
// A recorded process is dead when /proc/<pid> is gone, when it is a zombie,
// or when the pid now belongs to another process (its start time differs).
// wcache never signals a pid whose start time does not match the recorded
// one, and never signals its own process.
//
// Files are only as trustworthy as their owners (trust.go): a ready or lock
// file owned by neither root nor the effective uid names no daemon and
// makes nobody a target (ReadReady returns *UntrustedFileError; such a lock
// file is replaced when free and refused, never signalled, when held), and a
// trusted file vouches only for a process running as its owner. Before any
// signal the process must be the flock holder the kernel lists in
// /proc/locks for this lock file, with the recorded start time.
//
// Cleanup decides, in this order:
//
//	no socket, ready or lock file          → "none", nothing touched
//	lock held, or ready-file process alive → *LiveDaemonError (pid, paths),
//	                                          unless Force
//	Force                                   → SIGTERM, Grace, SIGKILL, wait until
//	                                          the process is gone and the lock is
//	                                          free, remove its files: "took-over"
//	otherwise (dead, zombie, reused pid)   → remove socket and ready files:
//	                                          "removed-stale" (or "none" if only
//	                                          the lock file was there)
//
// Lock files are never deleted: removing a lock file while another process
// waits on it would let two processes lock two different inodes.
//
// This package is Linux-only: it reads /proc and uses flock(2).
package daemonfile
