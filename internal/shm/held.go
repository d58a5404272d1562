package shm

import "sync/atomic"

// SharedHeld and FilesHeld total, for the metrics, the bytes of shared
// messages mapped and the descriptors held by received messages, over
// every session of the process (mux's per-session Held counts).
var SharedHeld, FilesHeld atomic.Int64

// Held is a session's count that also adds to a process total (Total,
// set before the first Add).
type Held struct {
	atomic.Int64
	Total *atomic.Int64
}

// Add adds d to the count and to its total, and returns the new count.
func (c *Held) Add(d int64) int64 { c.Total.Add(d); return c.Int64.Add(d) }
