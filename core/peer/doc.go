// Package peer is the cross-node half of peer fill (docs/peer-fill.md): a
// daemon that is to load weights another node's daemon already serves asks
// that daemon for them, by weights identity (core/cacheconfig
// .WeightsIdentity), and streams the bytes into its own device memory
// instead of reading the checkpoint again.
//
// The pieces, each behind an interface so the daemon wires them and an
// RDMA transport can replace TCP later:
//
//   - Transport (transport.go) moves bytes from one peer: Describe asks
//     what the peer holds under an identity (an Offer: arenas with sizes
//     and content digests), Open starts a Session that reads ranges.
//     TCPTransport is the implementation over TCP with mutual TLS.
//   - Server (server.go) serves a Source's generations to authenticated
//     peers only (mutual TLS, certificates from files: Credentials), with a
//     bounded number of connections, per peer and in all, and a byte rate
//     limit.
//   - Fetch (fetch.go) picks a peer (a list, or one DNS name resolving to
//     many), reads the offer's arenas on several parallel sessions into a
//     Sink, checks every arena's content digest (sdk/filedigest's tree
//     digest), and only then commits the sink; on any failure the sink is
//     aborted and never committed, and the caller falls back to the files.
//
// The wire format is proto/wcache/peer/v1: length-delimited control
// messages, raw bytes after a Read's answer.
package peer
