package sdk

// APIVersion is the newest backend plugin API version this sdk speaks: the
// go-plugin handshake's ProtocolVersion (plugin.Serve does the handshake). A
// plugin built with this sdk serves every version in APIVersions (go-plugin's
// VersionedPlugins), and the host picks the newest one both speak, so a
// plugin and a host of different releases still work together as long as
// they share one version. It changes only with an incompatible change of
// the Backend contract or its gRPC service.
//
// Versions:
//
//	1  the original backend.v1 service
//	2  adds Configure and InfoResponse.options (the host's --backend-opt)
const APIVersion = 2

// APIVersions returns every backend API version this sdk speaks, oldest
// first. sdk/plugin.Serve offers them all unless WithAPIVersions narrows
// them.
func APIVersions() []int { return []int{1, 2} }
