package connbench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// config is the command line of `bench conns`.
type config struct {
	network     string
	total       int
	perShard    int
	mode        string
	steps       []int
	rounds      int
	margin      uint64
	timeout     time.Duration
	window      int
	settle      time.Duration
	ioTimeout   time.Duration
	dir         string
	heapDir     string
	raiseNoFile bool
}

const usageText = `usage: warren bench conns [flags]

Holds up to --total live warren connections over unix sockets, TCP or
WebSocket (--network) and proves, in rounds, that every one of them works:
each connection makes one unary call (Conns.Tick, raw codec) per round, the
servers' counts must add up to the connections and every client checks every
reply. The connections are spread over shards, each a server process
(rpc.Server) on its own socket and a client process, of at most --per-shard
connections (a process may hold only RLIMIT_NOFILE descriptors). Over tcp and
ws each shard's server listens on a port of its own on 127.0.0.1 and its
client connects from source addresses of its own in 127.0.0.0/8, a new one
every 12,000 connections, within the ephemeral port range. As
root, the run raises the kernel settings it needs (fs.file-max; over tcp
and ws the ephemeral port range, net.core.netdev_max_backlog and
nf_conntrack_max), only as far as needed, says so, and restores them at
the end. The run steps up (1k, 10k, 100k, ... --total) and
reports per step: connect rate, round time, server memory per connection
(RSS after GC, over its RSS before listening), kernel memory per connection
(/proc/meminfo) and client memory. Before each step it estimates the memory
the step needs from the previous one and refuses to go on if MemAvailable
would fall under --margin; a watchdog stops the run if it ever does.

flags:
`

func parseConfig(args []string, stderr io.Writer) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("bench conns", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.network, "network", netUnix, "unix, tcp or ws (WebSocket over TCP loopback)")
	fs.IntVar(&cfg.total, "total", 1_000_000, "connections to reach")
	fs.IntVar(&cfg.perShard, "per-shard", 19_000, "most connections per server process (lowered to fit RLIMIT_NOFILE unless --raise-nofile)")
	fs.BoolVar(&cfg.raiseNoFile, "raise-nofile", false, "raise the hard RLIMIT_NOFILE (and fs.nr_open) to fit --per-shard, as root")
	fs.StringVar(&cfg.mode, "mode", modeEventLoop, "server mode: eventloop or goroutine")
	steps := fs.String("steps", "", "comma-separated connection counts to step through (default 1000, 10000, ... up to --total)")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds (one call per connection) per step")
	margin := fs.String("margin", "2GiB", "smallest MemAvailable to leave to the rest of the machine")
	fs.DurationVar(&cfg.timeout, "timeout", 15*time.Minute, "bound on the whole run")
	fs.IntVar(&cfg.window, "window", 1000, "calls or handshakes each client process has in flight at once")
	fs.DurationVar(&cfg.settle, "settle", 11*time.Second, "wait before measuring memory after the rounds (idle sessions hibernate after 250ms, idle rpc workers exit after 10s)")
	fs.DurationVar(&cfg.ioTimeout, "io-timeout", time.Minute, "bound on each client read or write")
	fs.StringVar(&cfg.dir, "dir", "", "where to make the socket directory (default: the system's temporary directory)")
	fs.StringVar(&cfg.heapDir, "heap-profile", "", "`directory` to write each server's heap profile to when memory is measured (server-SHARD-CONNS.pb.gz)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.margin, err = parseSize(*margin); err != nil {
		return cfg, fmt.Errorf("--margin: %w", err)
	}
	switch {
	case cfg.total < 1:
		return cfg, errors.New("--total must be at least 1")
	case cfg.perShard < 1:
		return cfg, errors.New("--per-shard must be at least 1")
	case cfg.network != netUnix && cfg.network != netTCP && cfg.network != netWS:
		return cfg, fmt.Errorf("--network %q: want unix, tcp or ws", cfg.network)
	case cfg.mode != modeEventLoop && cfg.mode != modeGoroutine:
		return cfg, fmt.Errorf("--mode %q: want eventloop or goroutine", cfg.mode)
	case cfg.rounds < 1:
		return cfg, errors.New("--rounds must be at least 1")
	case cfg.window < 1:
		return cfg, errors.New("--window must be at least 1")
	case cfg.timeout <= 0:
		return cfg, errors.New("--timeout must be positive")
	}
	if cfg.steps, err = parseSteps(*steps, cfg.total); err != nil {
		return cfg, fmt.Errorf("--steps: %w", err)
	}
	return cfg, nil
}

// parseSteps returns the connection counts to step through: s (increasing,
// at most total), ending with total; by default 1000, 10000, ... below
// total, then total.
func parseSteps(s string, total int) ([]int, error) {
	var steps []int
	if s == "" {
		for n := 1000; n < total; n *= 10 {
			steps = append(steps, n)
		}
	} else {
		for f := range strings.SplitSeq(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > total || len(steps) > 0 && n <= steps[len(steps)-1] {
				return nil, fmt.Errorf("%q: want increasing counts from 1 to --total (%d)", f, total)
			}
			steps = append(steps, n)
		}
	}
	if len(steps) == 0 || steps[len(steps)-1] != total {
		steps = append(steps, total)
	}
	return steps, nil
}

// parseSize parses a byte count: 123, 512MiB, 2GiB (also KiB, MB, GB).
func parseSize(s string) (uint64, error) {
	units := []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	mult := uint64(1)
	for _, u := range units {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a size (such as 2GiB or 512MiB)", s)
	}
	return uint64(v * float64(mult)), nil
}

// Estimates of memory costs before any step has measured them:
// deliberately high (a goroutine-mode connection costs about 10 KiB).
