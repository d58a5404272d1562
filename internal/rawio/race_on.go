//go:build race || msan || asan

package rawio

// RaceEnabled is set under the race detector and the memory and address
// sanitizers, which the ordinary system calls inform and raw ones do not
// (see rawio_linux.go).
const RaceEnabled = true
