//go:build linux

package idle

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// checkRaceLogs passes on to stderr the race detector's reports that the
// server child of system wrote in dir (when this program was built with the
// race detector), except those whose two accesses are both in code under
// prefix (see Peer.RacePrefix).
func checkRaceLogs(dir, system, prefix string) {
	files, _ := filepath.Glob(filepath.Join(dir, "race.*"))
	known := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, rep := range strings.Split(string(b), "==================\n") {
			if !strings.HasPrefix(rep, "WARNING: DATA RACE") {
				continue
			}
			// The two accesses' stacks come before the goroutines' creations.
			accesses, _, _ := strings.Cut(rep, "\nGoroutine ")
			first, second, _ := strings.Cut(accesses, "\n\n")
			if strings.Contains(first, prefix) && strings.Contains(second, prefix) &&
				!strings.Contains(accesses, "warren/bench/idle") {
				known++
				continue
			}
			fmt.Fprintf(os.Stderr, "%s server child:\n==================\n%s==================\n", system, rep)
		}
	}
	if known > 0 {
		fmt.Fprintf(os.Stderr, "%s server child: %d race reports within %s, left out\n", system, known, prefix)
	}
}
