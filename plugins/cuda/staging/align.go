package staging

import "unsafe"

// addrAligned reports whether p starts at an Alignment-aligned address.
func addrAligned(p []byte) bool {
	return len(p) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(p)))%Alignment == 0
}
