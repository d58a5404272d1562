//go:build !linux

package idle

import (
	"errors"
	"time"
)

// Modes are the server modes measured; Networks the transports.
var (
	Modes    = []string{"goroutine", "eventloop"}
	Networks = []string{"unix", "tcp"}
)

var errLinux = errors.New("idle: the idle-connection measurements need Linux")

// Result is one idle-memory measurement (see the Linux documentation).
type Result struct {
	Mode, Network                       string
	Conns                               int
	ServerBytesPerConn                  float64
	HeapBytesPerConn, StackBytesPerConn float64
	KernelBytesPerConn                  float64
	TopKernel                           []string
	Goroutines                          int
	BaseRSS, RSS                        uint64
}

// RaiseFileLimit is not implemented here.
func RaiseFileLimit() (uint64, error) { return 0, errLinux }

// Measure is not implemented here.
func Measure(mode, network string, n int, settle time.Duration, call bool) (Result, error) {
	return Result{}, errLinux
}

// AcceptRate is not implemented here.
func AcceptRate(mode string, n, parallel, batch int) (float64, error) { return 0, errLinux }
