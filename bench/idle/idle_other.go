//go:build !linux

package idle

import (
	"errors"
	"io"
	"time"
)

// Peer is a WebSocket server measured next to warren (see the Linux
// documentation).
type Peer struct {
	Serve      func(in io.Reader, out io.Writer) error
	RacePrefix string
}

var peers = map[string]Peer{}

// RegisterPeer makes the WebSocket server p measurable as system name.
func RegisterPeer(name string, p Peer) {
	peers[name] = p
	Systems = append(Systems, name)
}

// AnswerStats is not implemented here.
func AnswerStats(in io.Reader, out io.Writer, conns func() int64) error { return errLinux }

var errLinux = errors.New("idle: the idle-connection measurements need Linux")

// Result is one idle-memory measurement (see the Linux documentation).
type Result struct {
	System                              string
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

// MeasureSystem is not implemented here.
func MeasureSystem(system, mode, network string, n int, settle time.Duration, call bool) (Result, error) {
	return Result{}, errLinux
}

// AcceptRate is not implemented here.
func AcceptRate(mode string, n, parallel, batch int) (float64, error) { return 0, errLinux }
