// Package staging places a GPU backend's pinned staging memory next to its
// GPU: NUMANode reads the device's NUMA node from sysfs, and OnNode runs an
// allocation (cuMemHostAlloc, hipHostMalloc) with the calling thread's
// memory policy preferring that node, so that the driver's pages land where
// the GPU's DMA reads them fastest. The reads and copies themselves are the
// shared fill pipeline's (sdk/fill). The CUDA and ROCm backends use it.
package staging
