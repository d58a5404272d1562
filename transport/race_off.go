//go:build !race && !msan && !asan

package transport

const raceEnabled = false
