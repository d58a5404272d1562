// Package report holds the benchmark's results and writes them as JSON,
// markdown tables and an SVG chart.
package report

import (
	"encoding/json"
	"io"
)

// File is what -json writes.
type File struct {
	Machine Machine `json:"machine"`
	Rows    []Row   `json:"rows"`
}

// Row is one measured configuration: one system in one scenario at one
// payload size, summarized over its repetitions. Fields that do not apply
// to a scenario are left zero and omitted from the JSON; the allocation
// figures are pointers so that a measured zero is still written.
//
// Across repetitions, rps, gbps, mean_us, p50_us, p99_us and the
// allocation figures are medians; rps_min/rps_max and gbps_min/gbps_max
// give their spread; min_us and max_us are the fastest and slowest single
// call of all repetitions.
type Row struct {
	System       string `json:"system"`   // warren, grpc, ttrpc, drpc, netrpc, raw
	Scenario     string `json:"scenario"` // unary, seqrtt, rawlat, rawtput, stream, idle
	Transport    string `json:"transport,omitempty"`
	Mode         string `json:"mode,omitempty"` // server "separate" (own process) or "inprocess"
	PayloadBytes int    `json:"payload_bytes,omitempty"`
	Concurrency  int    `json:"concurrency,omitempty"` // concurrent callers
	Conns        int    `json:"conns,omitempty"`       // client connections they share
	Calls        int    `json:"calls,omitempty"`       // calls (or messages) per repetition

	RPS    float64 `json:"rps,omitempty"`
	RPSMin float64 `json:"rps_min,omitempty"`
	RPSMax float64 `json:"rps_max,omitempty"`
	MinUS  float64 `json:"min_us,omitempty"`
	MeanUS float64 `json:"mean_us,omitempty"`
	P50US  float64 `json:"p50_us,omitempty"`
	P99US  float64 `json:"p99_us,omitempty"`
	MaxUS  float64 `json:"max_us,omitempty"`

	// Allocations and bytes allocated per call (or message), client and
	// server together.
	AllocsPerCall *float64 `json:"allocs_per_call,omitempty"`
	BytesPerCall  *float64 `json:"bytes_per_call,omitempty"`

	GBps    float64 `json:"gbps,omitempty"` // 10^9 bytes/s, each message counted once
	GBpsMin float64 `json:"gbps_min,omitempty"`
	GBpsMax float64 `json:"gbps_max,omitempty"`

	// Idle connections (scenario "idle", see package idle): the server's
	// resident memory and the kernel's slab memory per idle connection.
	// Mode is then the server's mode, "goroutine" or "eventloop".
	ServerBytesPerConn float64 `json:"server_bytes_per_conn,omitempty"`
	KernelBytesPerConn float64 `json:"kernel_bytes_per_conn,omitempty"`

	Reps int    `json:"reps,omitempty"`
	Note string `json:"note,omitempty"`
}

// Machine records where and how the results were taken.
type Machine struct {
	Date        string `json:"date"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	CPU         string `json:"cpu,omitempty"`
	Cores       int    `json:"cores"`
	GOMAXPROCS  int    `json:"gomaxprocs"`
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	Kernel      string `json:"kernel,omitempty"`
	GoVersion   string `json:"go_version"`
	// LoadAvg is /proc/loadavg at the start: the machine may be shared.
	LoadAvg string `json:"loadavg,omitempty"`
	// Modules maps module paths (warren and the peers) to their versions.
	Modules map[string]string `json:"modules"`
	// WarrenRevision is the git revision of the warren tree measured,
	// "+dirty" if it had changes.
	WarrenRevision string `json:"warren_revision,omitempty"`
	Args           string `json:"args"`
}

// WriteJSON writes f indented.
func WriteJSON(w io.Writer, f *File) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(f)
}

// Float returns a pointer to v, for the allocation fields.
func Float(v float64) *float64 { return &v }
