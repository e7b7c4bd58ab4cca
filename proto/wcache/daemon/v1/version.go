package daemonv1

// ProtocolVersion is the version of the daemon protocol (wcache.daemon.v1)
// that this package's messages describe. A client sends it in
// CacheConfig.protocol_version and a daemon reports it in Status; a daemon
// refuses a config naming another version. It changes only with an
// incompatible change of the protocol, which also gets a new proto package.
//
// This file is written by hand; make proto leaves it alone.
const ProtocolVersion = 1
