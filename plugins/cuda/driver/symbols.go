package driver

// symbol indexes the entry points the backend resolves at Open.
type symbol int

const (
	symInit symbol = iota
	symDriverGetVersion
	symDeviceGetCount
	symDeviceGet
	symDeviceGetName
	symDeviceTotalMem
	symDeviceGetAttribute
	symDeviceGetUUIDV2
	symDeviceGetUUID
	symPrimaryCtxRetain
	symPrimaryCtxRelease
	symCtxSetCurrent
	symCtxSynchronize
	symMemGetInfo
	symMemAlloc
	symMemFree
	symMemGetAddressRange
	symMemHostAlloc
	symMemFreeHost
	symStreamCreate
	symStreamDestroy
	symStreamSynchronize
	symEventCreate
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
	numSymbols
)

// String returns the exported (versioned) symbol name.
func (s symbol) String() string {
	names := [numSymbols]string{
		symInit:               "cuInit",
		symDriverGetVersion:   "cuDriverGetVersion",
		symDeviceGetCount:     "cuDeviceGetCount",
		symDeviceGet:          "cuDeviceGet",
		symDeviceGetName:      "cuDeviceGetName",
		symDeviceTotalMem:     "cuDeviceTotalMem_v2",
		symDeviceGetAttribute: "cuDeviceGetAttribute",
		symDeviceGetUUIDV2:    "cuDeviceGetUuid_v2",
		symDeviceGetUUID:      "cuDeviceGetUuid",
		symPrimaryCtxRetain:   "cuDevicePrimaryCtxRetain",
		symPrimaryCtxRelease:  "cuDevicePrimaryCtxRelease_v2",
		symCtxSetCurrent:      "cuCtxSetCurrent",
		symCtxSynchronize:     "cuCtxSynchronize",
		symMemGetInfo:         "cuMemGetInfo_v2",
		symMemAlloc:           "cuMemAlloc_v2",
		symMemFree:            "cuMemFree_v2",
		symMemGetAddressRange: "cuMemGetAddressRange_v2",
		symMemHostAlloc:       "cuMemHostAlloc",
		symMemFreeHost:        "cuMemFreeHost",
		symStreamCreate:       "cuStreamCreate",
		symStreamDestroy:      "cuStreamDestroy_v2",
		symStreamSynchronize:  "cuStreamSynchronize",
		symEventCreate:        "cuEventCreate",
		symEventDestroy:       "cuEventDestroy_v2",
		symEventRecord:        "cuEventRecord",
		symEventSynchronize:   "cuEventSynchronize",
		symMemcpyHtoDAsync:    "cuMemcpyHtoDAsync_v2",
		symMemcpyDtoH:         "cuMemcpyDtoH_v2",
		symIpcGetMemHandle:    "cuIpcGetMemHandle",
		symIpcOpenMemHandle:   "cuIpcOpenMemHandle_v2",
		symIpcCloseMemHandle:  "cuIpcCloseMemHandle",
		symGetErrorName:       "cuGetErrorName",
		symGetErrorString:     "cuGetErrorString",
	}
	if s < 0 || s >= numSymbols {
		return "cu?"
	}
	return names[s]
}

// optional reports whether Open tolerates the symbol's absence: the two
// UUID entry points are each optional, but at least one must exist.
func (s symbol) optional() bool {
	return s == symDeviceGetUUIDV2 || s == symDeviceGetUUID
}
