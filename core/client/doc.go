// Package client finds the wcache daemon of a GPU and attaches to it. It is
// importable by third parties (engines written in Go, tools); the Python
// client follows the same rules.
//
// Discovery answers "which daemon?" with the device's UUID, never a rank:
// BySocket takes an explicit path, ByDeviceUUID derives it from a
// paths.Layout, and ByOrdinal resolves the UUID of the GPU the caller
// actually uses through a UUIDResolver at attach time.
//
// Before dialing, the socket path is checked with lstat:
//
//   - absent: ErrNoDaemon. With ErrEmpty (a daemon that holds no weights,
//     see below) this is the ONLY error after which a caller may fall back
//     to loading from disk.
//   - a symlink, not a socket, or owned by another user (unless allowed):
//     *UnsafeSocketError, refused.
//   - connection refused: *DaemonDeadError (a daemon crashed and left its
//     socket behind; `wcache cleanup` removes it). Never a silent fallback.
//
// Attach sends the caller's CacheConfig; a mismatch is a
// *cacheconfig.MismatchError listing every differing field. A daemon found
// by UUID (or ordinal) whose manifest names another device is refused with a
// *DeviceMismatchError (ErrBadManifest). On a match the
// Attachment holds the manifest and the Lease: the daemon keeps the weights
// while the lease is open; Close releases it, Done fires when the daemon
// goes away, Notices delivers KIND_DRAINING notices. A daemon that holds no
// weights (started without a model, evicted, or being published into)
// answers with an *EmptyError (ErrEmpty).
//
// Publish fills an empty daemon with the caller's own tensors (see
// docs/publish.md): the daemon plans and allocates, the caller's FillFunc
// copies the bytes into the writable handles (ShmFill does it for
// posix-shm), and the commit makes the daemon serve them. Evict empties a
// daemon again once its leases are gone.
package client
