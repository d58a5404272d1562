package idle

import "slices"

// Modes are the server modes measured; Networks the transports measured by
// default. A third mode, "bare", is a minimal epoll loop that only exchanges
// prefaces and keeps each descriptor in a slice: the floor, for reference.
// The network "ws" is WebSocket over TCP loopback (see Supported).
//
// Systems are the servers that can be measured: warren, and WebSocket
// servers for comparison, which serve network "ws" in mode "eventloop"
// only: "gobwas-epoll" (github.com/gobwas/ws with an epoll loop of its own,
// as in "Going Infinite, handling 1M websockets connections in Go"), and
// those that packages register with RegisterPeer, such as "nbio"
// (package nbiopeer).
var (
	Modes       = []string{"goroutine", "eventloop"}
	Networks    = []string{"unix", "tcp"}
	AllNetworks = []string{"unix", "tcp", "ws"}
	Systems     = []string{"warren", "gobwas-epoll"}
)

// Supported reports whether MeasureSystem can measure system in mode on
// network: warren in every mode on unix and tcp, and in modes goroutine and
// eventloop on ws; the other systems (registered ones only, besides
// gobwas-epoll) in mode eventloop on ws.
func Supported(system, mode, network string) bool {
	switch system {
	case "warren":
		switch network {
		case "unix", "tcp":
			return mode == "goroutine" || mode == "eventloop" || mode == "bare"
		case "ws":
			return mode == "goroutine" || mode == "eventloop"
		}
	case "gobwas-epoll":
		return network == "ws" && mode == "eventloop"
	}
	if peers[system].Serve != nil {
		return network == "ws" && mode == "eventloop"
	}
	return false
}

// WSPath is the HTTP path every WebSocket server of the child upgrades.
const WSPath = "/idle"

// Median returns the median over results of the figure f picks (the upper
// one of an even count). results must not be empty.
func Median(results []Result, f func(Result) float64) float64 {
	v := make([]float64, len(results))
	for i, r := range results {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}
