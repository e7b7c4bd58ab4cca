package cli

import "fmt"

// humanBytes formats a byte count for people, with a binary unit and one
// decimal: "512 B", "1.5 KiB", "80.0 GiB" (up to EiB); every command
// prints sizes this way. sdk.ParseSize reads what it writes back, to within
// the rounding of that decimal (up to TiB).
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
