package nvmlinfo

import (
	"fmt"
	"strconv"
	"strings"
)

// FormatBusID formats a PCI address as "dddd:bb:dd.f" in lowercase hex,
// the form cuDeviceGetPCIBusId and sysfs use.
func FormatBusID(domain, bus, device, function int) string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", domain, bus, device, function)
}

// NormalizeBusID rewrites NVML's "00000000:3B:00.0" (8-digit domain,
// uppercase) or any "domain:bus:device.function" spelling as FormatBusID
// does. It reports false for anything else.
func NormalizeBusID(s string) (string, bool) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return "", false
	}
	devFn := strings.Split(parts[2], ".")
	if len(devFn) != 2 {
		return "", false
	}
	var v [4]int
	for i, p := range []string{parts[0], parts[1], devFn[0], devFn[1]} {
		n, err := strconv.ParseUint(p, 16, 32)
		if err != nil || p == "" {
			return "", false
		}
		v[i] = int(n)
	}
	if v[1] > 0xff || v[2] > 0x1f || v[3] > 7 {
		return "", false
	}
	return FormatBusID(v[0], v[1], v[2], v[3]), true
}
