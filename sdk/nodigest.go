package sdk

import "context"

// noDigestKey is the context key of WithoutDigest.
type noDigestKey struct{}

// WithoutDigest returns ctx marked so that a Load under it computes no
// content-digest leaves (LoadStats.Leaves stays empty): the caller already
// knows the files' digests (the daemon's digest cache) and would discard
// them. It crosses the plugin wire (LoadRequest.no_digest); a backend
// built on sdk/fill honours it, one that does not may hash anyway, which
// only costs time. Loads without the mark compute the leaves.
func WithoutDigest(ctx context.Context) context.Context {
	return context.WithValue(ctx, noDigestKey{}, true)
}

// DigestWanted reports whether a Load under ctx should compute the
// content-digest leaves: true unless ctx came from WithoutDigest.
func DigestWanted(ctx context.Context) bool {
	off, _ := ctx.Value(noDigestKey{}).(bool)
	return !off
}
