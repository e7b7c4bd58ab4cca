package daemon

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// Bounds of what a refusal echoes of AttachRequest.handle_kinds.
const (
	maxEchoedKinds   = 16
	maxEchoedKindLen = 64
)

// handleKinds lists the distinct kinds of m's handles, in handle order.
func (m *manifest) handleKinds() []string {
	var kinds []string
	for _, h := range m.handles {
		if !slices.Contains(kinds, h.GetKind()) {
			kinds = append(kinds, h.GetKind())
		}
	}
	return kinds
}

// handleKindsStatus answers an attach whose client listed the handle kinds
// it maps (AttachRequest.handle_kinds): nil when it did not say or maps
// every kind of m's handles (a generation's handles are the kind its
// backend exports: there is no other to offer), else FAILED_PRECONDITION
// with a HandleKindsRefused detail and a message saying what to change.
func handleKindsStatus(deviceUUID, backend string, m *manifest, clientKinds []string) error {
	if len(clientKinds) == 0 {
		return nil
	}
	have := m.handleKinds()
	var missing []string
	for _, k := range have {
		if !slices.Contains(clientKinds, k) {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	echo := make([]string, 0, min(len(clientKinds), maxEchoedKinds))
	for _, k := range clientKinds[:min(len(clientKinds), maxEchoedKinds)] {
		if len(k) > maxEchoedKindLen {
			k = k[:maxEchoedKindLen] + "…"
		}
		echo = append(echo, k)
	}
	msg := fmt.Sprintf("daemon of %s serves %s handles (backend %s); this client maps %s: use a client that maps %s "+
		"(the wcache Go and Python clients map memfd and posix-shm; memfd descriptors come from the descriptor channel, "+
		"docs/protocol.md), or start the daemon so that its backend exports a kind the client maps "+
		"(mock: --backend-opt handle=posix-shm; cuda: --backend-opt handle=cuda-ipc)",
		deviceUUID, strings.Join(have, ", "), backend, strings.Join(echo, ", "), strings.Join(missing, ", "))
	s := status.New(codes.FailedPrecondition, msg)
	withDetail, err := s.WithDetails(&daemonv1.HandleKindsRefused{DaemonKinds: have, ClientKinds: echo})
	if err != nil {
		return s.Err()
	}
	return withDetail.Err()
}
