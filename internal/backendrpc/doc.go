// Package backendrpc is the gRPC adapter pair of the backend protocol:
// NewServer serves an sdk.Backend as backendv1.BackendServer (the plugin's
// side, used by sdk/plugin), NewClient makes a backendv1.BackendClient an
// sdk.Backend (the host's side). Errors cross as gRPC statuses carrying a
// backendv1.ErrorDetail (ToStatus), so errors.Is on the sdk sentinels holds
// on both sides. A backend author never calls it: sdk/plugin.Serve does.
package backendrpc
