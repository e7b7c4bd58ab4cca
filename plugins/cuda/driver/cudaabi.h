// cudaabi.h - the types of the CUDA driver ABI that wcache uses, laid out as
// CUDA 12's cuda.h lays them out on LP64 (CUdeviceptr is unsigned long long,
// CUdevice is int), so that no CUDA SDK is needed at build time. The
// trampolines (trampolines.h) and the test fake of the driver
// (testdata/fakecuda/fakecuda.c) both include it: the caller and the fake
// agree on one layout, and the sizes below fail either build if it drifts.
#ifndef WCACHE_CUDA_ABI_H
#define WCACHE_CUDA_ABI_H

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef struct { char bytes[16]; } CUuuid;
typedef struct { char reserved[64]; } CUipcMemHandle;

/* Virtual memory management. */
typedef unsigned long long CUmemGenericAllocationHandle;

typedef struct {
	int type; /* CUmemLocationType: CU_MEM_LOCATION_TYPE_DEVICE = 1 */
	int id;
} CUmemLocation;

typedef struct {
	unsigned type;                 /* CUmemAllocationType: PINNED = 1 */
	unsigned requestedHandleTypes; /* CUmemAllocationHandleType bits */
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

typedef struct {
	CUmemLocation location;
	unsigned flags; /* CUmemAccess_flags: READWRITE = 3 */
} CUmemAccessDesc;

_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp is 32 bytes on LP64");
_Static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc is 12 bytes");

#endif
