//go:build linux && race

package idle

// raceEnabled: this program was built with the race detector.
const raceEnabled = true
