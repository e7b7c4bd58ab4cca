package daemon

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/cacheconfig"
)

// mismatchStatus is FAILED_PRECONDITION with a ConfigMismatch detail
// bounded by cacheconfig.BoundDiffs. The values travel once, in the detail;
// the message only counts and names the fields (mismatchMessage).
func mismatchStatus(diffs []cacheconfig.FieldDiff) error {
	kept, omitted := cacheconfig.BoundDiffs(diffs)
	st := status.New(codes.FailedPrecondition, mismatchMessage(kept, omitted))
	withDetail, err := st.WithDetails(mismatchToProto(kept, omitted))
	if err != nil {
		return st.Err()
	}
	return withDetail.Err()
}

// generationMismatchStatus is mismatchStatus for a daemon holding several
// generations: the diffs are those of g, the nearest of the serving ones
// compared; the detail names it (generation, config digest) and how many
// were compared, and so does the message when there were several.
func generationMismatchStatus(diffs []cacheconfig.FieldDiff, g *generation, compared int) error {
	kept, omitted := cacheconfig.BoundDiffs(diffs)
	msg := mismatchMessage(kept, omitted)
	if compared > 1 {
		msg = fmt.Sprintf("no generation of the %d held matches; nearest %s (%s): %s", compared, g.Digest, g.Config.Model, msg)
	}
	st := status.New(codes.FailedPrecondition, msg)
	detail := mismatchToProto(kept, omitted)
	detail.Generation, detail.ConfigDigest, detail.Generations = g.ID, g.Digest, uint32(compared)
	withDetail, err := st.WithDetails(detail)
	if err != nil {
		return st.Err()
	}
	return withDetail.Err()
}

// maxMismatchMessageNames bounds the field names listed in a mismatch
// status message (bytes).
const maxMismatchMessageNames = 512

// mismatchMessage is "cache config mismatch on N fields: a, b, … (+M more);
// values in the ConfigMismatch detail".
func mismatchMessage(kept []cacheconfig.FieldDiff, omitted int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cache config mismatch on %d field(s): ", len(kept)+omitted)
	listed := 0
	for _, df := range kept {
		if listed > 0 && b.Len()+len(df.Field) > maxMismatchMessageNames {
			break
		}
		if listed > 0 {
			b.WriteString(", ")
		}
		b.WriteString(df.Field)
		listed++
	}
	if rest := len(kept) + omitted - listed; rest > 0 {
		fmt.Fprintf(&b, " (+%d more)", rest)
	}
	b.WriteString("; values in the ConfigMismatch detail")
	return b.String()
}
