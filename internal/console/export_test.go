package console

import "time"

// SetStuckWrite sets how long a write to a page that does not read may
// block, and returns a function that restores it.
func SetStuckWrite(d time.Duration) (restore func()) {
	old := stuckWrite
	stuckWrite = d
	return func() { stuckWrite = old }
}
