// Package defaults fills an option left unset with its default value: the
// one home of the `if o.X <= 0 { o.X = DefaultX }` step of core's options
// normalisations (the sdk, which may import only the internal packages
// test/archtest lists, writes its own). Two rules, since options differ on
// what counts as unset: Positive (zero or negative, for counts and
// durations where a negative value means nothing) and Zero (exactly the zero
// value, for options where any other value is the caller's to make). It is
// a leaf.
package defaults

// Number is the kinds of value Positive compares with zero: the integers,
// the floats and types built on them, such as time.Duration.
type Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64
}

// Positive sets *v to def when *v is zero or negative, and leaves it
// otherwise. For an unsigned type that is when *v is zero.
func Positive[T Number](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Zero sets *v to def when *v is its type's zero value, and leaves it
// otherwise (a negative number included).
func Zero[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
