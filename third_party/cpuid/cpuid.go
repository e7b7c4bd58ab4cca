// Package cpuid stands in for github.com/klauspost/cpuid/v2 in wcache's
// build (go.mod replaces that module with this folder). Its only user,
// lukechampine.com/blake3, asks it two questions: does the CPU, with the
// operating system's support, have AVX2, and AVX-512F. The original answers
// them from a detection run at package init that issues some fifty CPUID
// instructions; each one exits to the hypervisor on a virtual machine, where
// that init took ~0.35 ms of every wcache process (the CLI's included). This
// answers from golang.org/x/sys/cpu, whose init issues about six and
// checks the same OS support (XCR0's YMM and ZMM state bits).
//
// Only the API blake3 uses is here: a dependency that needs more of
// klauspost/cpuid fails to compile instead of getting wrong answers.
package cpuid

import "golang.org/x/sys/cpu"

// FeatureID names a CPU feature, as klauspost/cpuid's does.
type FeatureID int

// The features Supports knows.
const (
	// AVX2: 256-bit integer vector instructions, with the OS saving YMM state.
	AVX2 FeatureID = iota + 1
	// AVX512F: AVX-512 Foundation, with the OS saving ZMM and opmask state.
	AVX512F
)

// CPUInfo answers for the CPU this process runs on.
type CPUInfo struct{}

// CPU is the process's CPU, as klauspost/cpuid exports it.
var CPU CPUInfo

// Supports reports whether every feature in ids is present and usable;
// an unknown FeatureID is not.
func (CPUInfo) Supports(ids ...FeatureID) bool {
	for _, id := range ids {
		switch id {
		case AVX2:
			if !cpu.X86.HasAVX2 {
				return false
			}
		case AVX512F:
			if !cpu.X86.HasAVX512F {
				return false
			}
		default:
			return false
		}
	}
	return true
}
