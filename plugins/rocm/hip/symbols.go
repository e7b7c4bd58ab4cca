package hip

// symbol indexes the entry points Open resolves.
type symbol int

const (
	symInit symbol = iota
	symDriverGetVersion
	symGetDeviceCount
	symDeviceGet
	symDeviceGetUUID
	symDeviceGetName
	symDeviceGetPCIBusID
	symDeviceTotalMem
	symDeviceGetAttribute
	symSetDevice
	symDeviceSynchronize
	symMemGetInfo
	symMalloc
	symFree
	symMemGetAddressRange
	symHostMalloc
	symHostFree
	symStreamCreateWithFlags
	symStreamDestroy
	symStreamSynchronize
	symEventCreateWithFlags
	symEventDestroy
	symEventRecord
	symEventSynchronize
	symMemcpyHtoDAsync
	symMemcpyDtoH
	symIpcGetMemHandle
	symIpcOpenMemHandle
	symIpcCloseMemHandle
	symGetErrorName
	symGetErrorString
	symPointerGetAttribute
	symDeviceCanAccessPeer
	symDeviceEnablePeerAccess
	symMemcpyPeerAsync
	numSymbols
)

var symbolNames = [numSymbols]string{
	symInit:                  "hipInit",
	symDriverGetVersion:      "hipDriverGetVersion",
	symGetDeviceCount:        "hipGetDeviceCount",
	symDeviceGet:             "hipDeviceGet",
	symDeviceGetUUID:         "hipDeviceGetUuid",
	symDeviceGetName:         "hipDeviceGetName",
	symDeviceGetPCIBusID:     "hipDeviceGetPCIBusId",
	symDeviceTotalMem:        "hipDeviceTotalMem",
	symDeviceGetAttribute:    "hipDeviceGetAttribute",
	symSetDevice:             "hipSetDevice",
	symDeviceSynchronize:     "hipDeviceSynchronize",
	symMemGetInfo:            "hipMemGetInfo",
	symMalloc:                "hipMalloc",
	symFree:                  "hipFree",
	symMemGetAddressRange:    "hipMemGetAddressRange",
	symHostMalloc:            "hipHostMalloc",
	symHostFree:              "hipHostFree",
	symStreamCreateWithFlags: "hipStreamCreateWithFlags",
	symStreamDestroy:         "hipStreamDestroy",
	symStreamSynchronize:     "hipStreamSynchronize",
	symEventCreateWithFlags:  "hipEventCreateWithFlags",
	symEventDestroy:          "hipEventDestroy",
	symEventRecord:           "hipEventRecord",
	symEventSynchronize:      "hipEventSynchronize",
	symMemcpyHtoDAsync:       "hipMemcpyHtoDAsync",
	symMemcpyDtoH:            "hipMemcpyDtoH",
	symIpcGetMemHandle:       "hipIpcGetMemHandle",
	symIpcOpenMemHandle:      "hipIpcOpenMemHandle",
	symIpcCloseMemHandle:     "hipIpcCloseMemHandle",
	symGetErrorName:          "hipGetErrorName",
	symGetErrorString:        "hipGetErrorString",
	// Peer copies (peer fill).
	symPointerGetAttribute:    "hipPointerGetAttribute",
	symDeviceCanAccessPeer:    "hipDeviceCanAccessPeer",
	symDeviceEnablePeerAccess: "hipDeviceEnablePeerAccess",
	symMemcpyPeerAsync:        "hipMemcpyPeerAsync",
}

// String returns the exported symbol name.
func (s symbol) String() string {
	if s < 0 || s >= numSymbols {
		return "hip?"
	}
	return symbolNames[s]
}

// optional reports whether Open tolerates the symbol's absence:
// hipMemGetAddressRange only bounds an imported handle's claimed size; the
// peer-copy entry points serve peer copies only (see HasPeer).
func (s symbol) optional() bool { return s == symMemGetAddressRange || s.peer() }

// peer reports whether the symbol is one of the peer-copy entry points.
func (s symbol) peer() bool { return s >= symPointerGetAttribute && s <= symMemcpyPeerAsync }
