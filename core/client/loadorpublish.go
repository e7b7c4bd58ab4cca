package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/cacheconfig"
)

// Source says where the weights of a LoadOrPublish live.
type Source string

// The sources of a LoadResult.
const (
	// SourceAttached: the daemon held weights for the config (or another
	// engine published them while the loader ran): Attachment holds them.
	SourceAttached Source = "attached"
	// SourcePublished: the loader ran, its publication was committed and
	// Attachment holds the daemon's copy.
	SourcePublished Source = "published"
	// SourceLoaded: the caller's own loaded tensors are the weights
	// (Reason says why); Attachment is nil.
	SourceLoaded Source = "loaded"
)

// LoadFunc is an engine's own loading and post-processing. It runs at most
// once, and returns what to publish and the FillFunc that copies its
// tensors in; the caller keeps its loaded tensors, which are the weights
// when the result is SourceLoaded.
type LoadFunc func(ctx context.Context) (Publication, FillFunc, error)

// LoadResult is the outcome of LoadOrPublish.
type LoadResult struct {
	Source Source
	// Attachment holds the daemon's weights (nil for SourceLoaded): close
	// its Lease when they are no longer used.
	Attachment *Attachment
	// Reason says why the engine's own tensors are used, or, for a
	// SourceAttached after a lost publish race, that the race was lost.
	Reason string
}

// LoadOrPublish attaches when the daemon holds weights for cfg, publishes
// load's result into an empty daemon, and otherwise leaves the engine its
// own tensors, with one action per daemon state (docs/python-client.md,
// "Publish mode"; the Python load_or_publish does the same):
//   - empty (ErrEmpty), or a publish in progress: load, then publish;
//     another publish still in progress (ErrPublishInProgress):
//     SourceLoaded; weights committed meanwhile (ErrHoldsWeights): attach
//     to them when they match cfg (SourceAttached), SourceLoaded with the
//     mismatch in Reason when they do not;
//   - draining or stopping (ErrBusy): ask again until wait has passed,
//     then load (SourceLoaded);
//   - serving a match: SourceAttached, load is not called;
//   - serving other models only (even the nearest generation differs in
//     model or checkpoint digest; a draft beside its target): load, then
//     publish a generation of its own beside them
//     (SourcePublished); a daemon that has no room for it
//     (RESOURCE_EXHAUSTED: nothing is evicted for it), or an older daemon
//     holding one generation only: SourceLoaded with the reason. A daemon
//     kept for another parallel layout refuses the publish with the
//     *cacheconfig.MismatchError;
//   - serving this model with other settings (dtype, layout, engine): the
//     *cacheconfig.MismatchError (a deployment error, never a silent
//     reload).
//
// Attaches prove the files cfg.Model names (Attach): files not proven
// (ErrContentUnknown) are a miss, SourceLoaded; other content is the
// *cacheconfig.ContentMismatchError, an error. A publication that names no
// Files carries the content of those files (their identities taken before
// load runs, digests from the digest cache or hashed once).
//
// An absent daemon is the caller's (Dial's ErrNoDaemon): load on your own.
// pub.Config from load is replaced by cfg; set cfg.DeviceCapability (the
// daemon fills it into a publication that lacks it, and the attach after
// the publish compares it). Other errors of Attach, Publish and load are
// returned as they are.
func (c *Client) LoadOrPublish(ctx context.Context, cfg cacheconfig.Config, load LoadFunc, wait time.Duration) (*LoadResult, error) {
	deadline := time.Now().Add(wait)
	pause := 50 * time.Millisecond
	var beside error // the daemon serves other weights only
	for {
		a, err := c.Attach(ctx, cfg)
		me, mismatch := IsMismatch(err)
		switch {
		case err == nil:
			return &LoadResult{Source: SourceAttached, Attachment: a}, nil
		case mismatch && anotherModel(me):
			beside = err
		case errors.Is(err, ErrEmpty):
		case errors.Is(err, cacheconfig.ErrContentUnknown):
			// The files cfg.Model names are not proven to hold the
			// daemon's bytes (changed, copied, or none): a miss.
			return c.loadOnly(ctx, load, err.Error())
		case errors.Is(err, ErrBusy):
			if !time.Now().Before(deadline) {
				return c.loadOnly(ctx, load, fmt.Sprintf("%v (after waiting %s)", err, wait))
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(min(pause, time.Until(deadline))):
			}
			pause = min(2*pause, time.Second)
			continue
		default:
			return nil, err
		}
		break
	}
	// The files cfg.Model names, their identities taken before load reads
	// them: a publication that names no files carries their content, so
	// that later attaches prove their files against it.
	files, err := ModelFiles(cfg.Model)
	if err != nil {
		return nil, err
	}
	srcOpts := c.content
	srcOpts.Policy = cacheconfig.PolicyHash // a publication's records are digests, whatever the attach policy
	src, err := newContentProof(files, srcOpts, nil)
	if err != nil {
		return nil, err
	}
	pub, fill, err := load(ctx)
	if err != nil {
		return nil, err
	}
	pub.Config = cfg
	if len(pub.Files) == 0 && len(src.files) > 0 {
		if pub.Files, err = src.records(ctx); err != nil {
			return nil, err
		}
	}
	_, err = c.Publish(ctx, pub, fill)
	switch {
	case err == nil:
		a, err := c.Attach(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return &LoadResult{Source: SourcePublished, Attachment: a}, nil
	case errors.Is(err, ErrHoldsWeights):
		// Another engine committed while load ran.
		a, aerr := c.Attach(ctx, cfg)
		if aerr == nil {
			return &LoadResult{Source: SourceAttached, Attachment: a, Reason: err.Error()}, nil
		}
		if _, ok := IsMismatch(aerr); ok || errors.Is(aerr, ErrBusy) || errors.Is(aerr, ErrEmpty) {
			if beside != nil { // a daemon that holds one generation only
				return &LoadResult{Source: SourceLoaded, Reason: fmt.Sprintf("the daemon holds other weights and no room for these: %v", beside)}, nil
			}
			return &LoadResult{Source: SourceLoaded, Reason: fmt.Sprintf("lost the publish race (%v) and cannot attach: %v", err, aerr)}, nil
		}
		return nil, aerr
	case errors.Is(err, ErrPublishInProgress), errors.Is(err, ErrBusy):
		return &LoadResult{Source: SourceLoaded, Reason: err.Error()}, nil
	case isResourceExhausted(err):
		// No room beside what the daemon holds; nothing is evicted for us.
		return &LoadResult{Source: SourceLoaded, Reason: err.Error()}, nil
	}
	return nil, err
}

// anotherModel reports whether a mismatch says the daemon holds other
// models only: even the nearest generation differs in model or checkpoint
// digest. This model with other settings is a deployment error.
func anotherModel(me *cacheconfig.MismatchError) bool {
	for _, d := range me.Diffs {
		if d.Field == "model" || d.Field == "checkpoint_digest" {
			return true
		}
	}
	return false
}

// isResourceExhausted reports whether err carries a RESOURCE_EXHAUSTED
// status anywhere in its chain.
func isResourceExhausted(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if s, ok := status.FromError(e); ok && s.Code() == codes.ResourceExhausted {
			return true
		}
	}
	return false
}

// loadOnly runs load for the engine's own tensors and publishes nothing.
func (c *Client) loadOnly(ctx context.Context, load LoadFunc, reason string) (*LoadResult, error) {
	if _, _, err := load(ctx); err != nil {
		return nil, err
	}
	return &LoadResult{Source: SourceLoaded, Reason: reason}, nil
}
