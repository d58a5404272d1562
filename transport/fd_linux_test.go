package transport_test

import (
	"net"
	"os"
	"sort"
	"strings"
)

// openFiles returns the process's open file descriptors and what they refer
// to.
func openFiles() map[string]string {
	// Start the network poller first: its descriptors stay open for good.
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		ln.Close()
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	files := make(map[string]string, len(entries))
	for _, e := range entries {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || strings.HasPrefix(target, "/proc/") {
			continue // the descriptor ReadDir itself used
		}
		files[e.Name()] = target
	}
	return files
}

// leakedFiles returns the descriptors open now that were not in before.
func leakedFiles(before map[string]string) []string {
	if before == nil {
		return nil
	}
	var leaked []string
	for fd, target := range openFiles() {
		if before[fd] != target {
			leaked = append(leaked, fd+" -> "+target)
		}
	}
	sort.Strings(leaked)
	return leaked
}
