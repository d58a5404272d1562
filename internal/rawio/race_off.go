//go:build !race && !msan && !asan

package rawio

const RaceEnabled = false
