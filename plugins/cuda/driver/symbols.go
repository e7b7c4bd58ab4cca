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
	symGetErrorName
	symGetErrorString
	// The two kinds of exported handles: legacy IPC (cuda-ipc), then
	// virtual memory management (cuda-vmm-fd; see vmm).
	symIpcGetMemHandle
	symIpcOpenMemHandle
	symIpcCloseMemHandle
	symMemCreate
	symMemGetAllocationGranularity
	symMemExportToShareableHandle
	symMemImportFromShareableHandle
	symMemAddressReserve
	symMemMap
	symMemSetAccess
	symMemUnmap
	symMemAddressFree
	symMemRelease
	symPointerGetAttribute
	symDeviceCanAccessPeer
	symMemcpyPeerAsync
	numSymbols
)

// abi is the CUDA ABI version every entry point is resolved at through
// cuGetProcAddress: the CUDA 12.0 signatures this package declares in
// trampolines.h. A newer driver (CUDA 13 changed several signatures) still
// hands out these versions when asked for them.
const abi = 12000

// entry is how one symbol is found: by base name and ABI version through
// cuGetProcAddress, or by its exported (versioned) name through dlsym.
type entry struct {
	export  string // dlsym name, e.g. "cuMemAlloc_v2"
	base    string // cuGetProcAddress name, e.g. "cuMemAlloc"
	version int    // cuGetProcAddress cudaVersion
}

var entries = [numSymbols]entry{
	symInit:               {"cuInit", "cuInit", abi},
	symDriverGetVersion:   {"cuDriverGetVersion", "cuDriverGetVersion", abi},
	symDeviceGetCount:     {"cuDeviceGetCount", "cuDeviceGetCount", abi},
	symDeviceGet:          {"cuDeviceGet", "cuDeviceGet", abi},
	symDeviceGetName:      {"cuDeviceGetName", "cuDeviceGetName", abi},
	symDeviceTotalMem:     {"cuDeviceTotalMem_v2", "cuDeviceTotalMem", abi},
	symDeviceGetAttribute: {"cuDeviceGetAttribute", "cuDeviceGetAttribute", abi},
	symDeviceGetUUIDV2:    {"cuDeviceGetUuid_v2", "cuDeviceGetUuid", abi},
	// v1 is the pre-11.4 entry point (physical GPU UUID in MIG mode).
	symDeviceGetUUID:      {"cuDeviceGetUuid", "cuDeviceGetUuid", 9020},
	symPrimaryCtxRetain:   {"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", abi},
	symPrimaryCtxRelease:  {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", abi},
	symCtxSetCurrent:      {"cuCtxSetCurrent", "cuCtxSetCurrent", abi},
	symCtxSynchronize:     {"cuCtxSynchronize", "cuCtxSynchronize", abi},
	symMemGetInfo:         {"cuMemGetInfo_v2", "cuMemGetInfo", abi},
	symMemAlloc:           {"cuMemAlloc_v2", "cuMemAlloc", abi},
	symMemFree:            {"cuMemFree_v2", "cuMemFree", abi},
	symMemGetAddressRange: {"cuMemGetAddressRange_v2", "cuMemGetAddressRange", abi},
	symMemHostAlloc:       {"cuMemHostAlloc", "cuMemHostAlloc", abi},
	symMemFreeHost:        {"cuMemFreeHost", "cuMemFreeHost", abi},
	symStreamCreate:       {"cuStreamCreate", "cuStreamCreate", abi},
	symStreamDestroy:      {"cuStreamDestroy_v2", "cuStreamDestroy", abi},
	symStreamSynchronize:  {"cuStreamSynchronize", "cuStreamSynchronize", abi},
	symEventCreate:        {"cuEventCreate", "cuEventCreate", abi},
	symEventDestroy:       {"cuEventDestroy_v2", "cuEventDestroy", abi},
	symEventRecord:        {"cuEventRecord", "cuEventRecord", abi},
	symEventSynchronize:   {"cuEventSynchronize", "cuEventSynchronize", abi},
	symMemcpyHtoDAsync:    {"cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync", abi},
	symMemcpyDtoH:         {"cuMemcpyDtoH_v2", "cuMemcpyDtoH", abi},
	symGetErrorName:       {"cuGetErrorName", "cuGetErrorName", abi},
	symGetErrorString:     {"cuGetErrorString", "cuGetErrorString", abi},
	// Legacy IPC (cuda-ipc handles).
	symIpcGetMemHandle:   {"cuIpcGetMemHandle", "cuIpcGetMemHandle", abi},
	symIpcOpenMemHandle:  {"cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle", abi},
	symIpcCloseMemHandle: {"cuIpcCloseMemHandle", "cuIpcCloseMemHandle", abi},
	// Virtual memory management (cuda-vmm-fd handles, CUDA 10.2+), unversioned.
	symMemCreate:                    {"cuMemCreate", "cuMemCreate", abi},
	symMemGetAllocationGranularity:  {"cuMemGetAllocationGranularity", "cuMemGetAllocationGranularity", abi},
	symMemExportToShareableHandle:   {"cuMemExportToShareableHandle", "cuMemExportToShareableHandle", abi},
	symMemImportFromShareableHandle: {"cuMemImportFromShareableHandle", "cuMemImportFromShareableHandle", abi},
	symMemAddressReserve:            {"cuMemAddressReserve", "cuMemAddressReserve", abi},
	symMemMap:                       {"cuMemMap", "cuMemMap", abi},
	symMemSetAccess:                 {"cuMemSetAccess", "cuMemSetAccess", abi},
	symMemUnmap:                     {"cuMemUnmap", "cuMemUnmap", abi},
	symMemAddressFree:               {"cuMemAddressFree", "cuMemAddressFree", abi},
	symMemRelease:                   {"cuMemRelease", "cuMemRelease", abi},
	// Peer copies (peer fill), unversioned.
	symPointerGetAttribute: {"cuPointerGetAttribute", "cuPointerGetAttribute", abi},
	symDeviceCanAccessPeer: {"cuDeviceCanAccessPeer", "cuDeviceCanAccessPeer", abi},
	symMemcpyPeerAsync:     {"cuMemcpyPeerAsync", "cuMemcpyPeerAsync", abi},
}

// String returns the exported (versioned) symbol name.
func (s symbol) String() string {
	if s < 0 || s >= numSymbols {
		return "cu?"
	}
	return entries[s].export
}

// optional reports whether Open tolerates the symbol's absence: the two
// UUID entry points are each optional, but at least one must exist; the
// virtual memory management ones are needed for cuda-vmm-fd handles only
// (see HasVMM), the peer-copy ones for peer copies only (see HasPeer).
func (s symbol) optional() bool {
	return s == symDeviceGetUUIDV2 || s == symDeviceGetUUID || s.vmm() || s.peer()
}

// peer reports whether the symbol is one of the peer-copy entry points.
func (s symbol) peer() bool { return s >= symPointerGetAttribute && s <= symMemcpyPeerAsync }

// vmm reports whether the symbol is one of the virtual memory management
// entry points.
func (s symbol) vmm() bool { return s >= symMemCreate && s <= symMemRelease }
