package fill

import (
	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/internal/mmap"
)

// residentSamples is how many pages of a file mostlyResident probes.
const residentSamples = 64

// mostlyResident reports whether at least half of a sample of fd's pages
// (residentSamples pages spread evenly over size bytes) is in the page
// cache, by mincore on a read-only mapping of the file. A file that cannot
// be mapped counts as resident, so that it is read buffered (the safe
// choice: O_DIRECT is only an optimisation).
func mostlyResident(fd int, size int64) bool {
	if size <= 0 {
		return true
	}
	m, err := mmap.FD(fd, uint64(size), mmap.Read)
	if err != nil {
		return true
	}
	defer func() { _ = mmap.Unmap(m) }()
	page := int64(unix.Getpagesize())
	pages := (size + page - 1) / page
	n := min(int64(residentSamples), pages)
	vec := make([]byte, 1)
	resident := int64(0)
	for i := range n {
		p := i * pages / n
		if err := mmap.Mincore(m[p*page:min((p+1)*page, size)], vec); err != nil {
			return true
		}
		if vec[0]&1 != 0 {
			resident++
		}
	}
	return 2*resident >= n
}
