// Package paths derives the discovery paths of a wcache daemon — its Unix
// socket, its ready file and its identity lock — from the physical device
// UUID of the GPU it serves.
//
// Discovery is keyed by the device UUID and by nothing else. Ranks are unique
// only inside one job, so rank-keyed paths let two jobs on one host find each
// other's daemons and load someone else's weights. A template therefore must
// contain the {device_uuid} placeholder, and it is the only placeholder.
//
// Templates come, in order of precedence, from a flag (Options), from the
// environment (WCACHE_SOCKET_TEMPLATE, WCACHE_READY_TEMPLATE), or from the
// defaults <dir>/{device_uuid}.sock and <dir>/{device_uuid}.ready.json, where
// <dir> is the per-user private directory returned by DefaultDir
// ($XDG_RUNTIME_DIR/wcache, else /tmp/wcache-<euid>). The lock file is always
// the ready file's path plus ".lock".
//
// Failure modes, each a typed error: a template without {device_uuid}, with an
// unknown placeholder, with unbalanced braces, relative, or containing ".."
// (*TemplateError); a device UUID that is not 1..128 ASCII letters, digits and
// '-' (*InvalidUUIDError), checked before the UUID reaches any path; a socket
// path longer than the 107 usable bytes of sun_path (*SocketPathTooLongError);
// a default directory that is a symlink, not a directory, owned by another
// user or accessible to group or others (*PrivateDirError).
package paths
