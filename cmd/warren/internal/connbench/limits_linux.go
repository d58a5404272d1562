package connbench

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// sysctlDir is where the kernel's settings are (tests point it elsewhere).
var sysctlDir = "/proc/sys"

// sysctlChange is a kernel setting the run changed, and its value before.
type sysctlChange struct {
	name     string // such as fs.file-max
	old, new string
}

// kernelLimits raises kernel settings for the run, only as far as it
// needs, and puts them back afterwards.
type kernelLimits struct {
	changed []sysctlChange
	nofile  *unix.Rlimit // RLIMIT_NOFILE before the run raised it
}

// noFile raises this process's RLIMIT_NOFILE (which its children inherit)
// to want if its hard limit is lower, and fs.nr_open, the most it may be,
// if that is lower too. It returns the change, or "" if none was needed.
func (k *kernelLimits) noFile(want uint64) (string, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return "", fmt.Errorf("getrlimit(RLIMIT_NOFILE): %w", err)
	}
	if rl.Max >= want {
		return "", nil
	}
	msg := ""
	if c, err := k.atLeast("fs.nr_open", want); err != nil {
		return "", err
	} else if c != nil {
		msg = c.String() + ", "
	}
	old := rl
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: want, Max: want}); err != nil {
		return "", fmt.Errorf("raising RLIMIT_NOFILE from %d to %d for the run (as root, or lower --per-shard): %w", rl.Max, want, err)
	}
	if k.nofile == nil {
		k.nofile = &old
	}
	return msg + fmt.Sprintf("RLIMIT_NOFILE %d -> %d", old.Max, want), nil
}

func sysctlPath(name string) string {
	return filepath.Join(sysctlDir, strings.ReplaceAll(name, ".", "/"))
}

// readSysctl returns the fields of a setting; ok is false if the setting
// does not exist (such as nf_conntrack_max without the conntrack module).
func readSysctl(name string) (f []string, ok bool, err error) {
	b, err := os.ReadFile(sysctlPath(name))
	if os.IsNotExist(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return strings.Fields(string(b)), true, nil
}

// set writes value to the setting, remembering its first value.
func (k *kernelLimits) set(name, old, value string) error {
	if err := os.WriteFile(sysctlPath(name), []byte(value+"\n"), 0); err != nil {
		return fmt.Errorf("raising %s from %q to %q for the run (as root, or raise it yourself): %w", name, old, value, err)
	}
	for i := range k.changed {
		if k.changed[i].name == name {
			k.changed[i].new = value
			return nil
		}
	}
	k.changed = append(k.changed, sysctlChange{name, old, value})
	return nil
}

// atLeast raises the single-number setting name to want if it is lower.
// It does nothing if the setting does not exist.
func (k *kernelLimits) atLeast(name string, want uint64) (*sysctlChange, error) {
	f, ok, err := readSysctl(name)
	if err != nil || !ok {
		return nil, err
	}
	if len(f) != 1 {
		return nil, fmt.Errorf("%s: unexpected value %q", name, f)
	}
	cur, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%s: unexpected value %q", name, f[0])
	}
	if cur >= want {
		return nil, nil
	}
	if err := k.set(name, f[0], strconv.FormatUint(want, 10)); err != nil {
		return nil, err
	}
	return k.last(name), nil
}

// portRange makes the ephemeral port range (net.ipv4.ip_local_port_range)
// hold at least n ports, lowering its first port (not under 1024), then
// raising its last (not over 65535).
func (k *kernelLimits) portRange(n int) (*sysctlChange, error) {
	const name = "net.ipv4.ip_local_port_range"
	f, ok, err := readSysctl(name)
	if err != nil || !ok {
		return nil, err
	}
	if len(f) != 2 {
		return nil, fmt.Errorf("%s: unexpected value %q", name, f)
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%s: unexpected value %q", name, f)
	}
	if hi-lo+1 >= n {
		return nil, nil
	}
	lo = max(1024, hi+1-n)
	hi = min(65535, max(hi, lo+n-1))
	if hi-lo+1 < n {
		return nil, fmt.Errorf("%d connections from one source address to one server port need %d ephemeral ports: more than there are (lower --per-shard)", n, n)
	}
	if err := k.set(name, strings.Join(f, " "), fmt.Sprintf("%d %d", lo, hi)); err != nil {
		return nil, err
	}
	return k.last(name), nil
}

func (k *kernelLimits) last(name string) *sysctlChange {
	for i := range k.changed {
		if k.changed[i].name == name {
			return &k.changed[i]
		}
	}
	return nil
}

// restore puts back every setting changed, last changed first, and says
// which.
func (k *kernelLimits) restore() (string, error) {
	var errs, done []string
	if k.nofile != nil {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, k.nofile); err != nil {
			errs = append(errs, err.Error())
		} else {
			done = append(done, fmt.Sprintf("RLIMIT_NOFILE %d", k.nofile.Max))
		}
		k.nofile = nil
	}
	for i := len(k.changed) - 1; i >= 0; i-- {
		c := k.changed[i]
		if err := os.WriteFile(sysctlPath(c.name), []byte(c.old+"\n"), 0); err != nil {
			errs = append(errs, err.Error())
		} else {
			done = append(done, c.name+" "+c.old)
		}
	}
	k.changed = nil
	if len(errs) > 0 {
		return strings.Join(done, ", "), fmt.Errorf("restoring kernel settings: %s", strings.Join(errs, "; "))
	}
	return strings.Join(done, ", "), nil
}

func (c sysctlChange) String() string { return fmt.Sprintf("%s %s -> %s", c.name, c.old, c.new) }

// sourceAddr is the first source address of shard i's client over tcp and
// ws: 127.0.1.1, 127.0.2.1, ... (all of 127.0.0.0/8 is this machine). The
// client takes the next address every perSource connections, up to 256 of
// them (4 million connections).
func sourceAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte((i + 1) >> 8), byte(i + 1), 1})
}

func joinChanges(cs []sysctlChange) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.String())
	}
	return strings.Join(s, ", ")
}

// raiseLimits raises the kernel settings the whole run needs: file handles
// for both ends of every connection, and over tcp and ws enough ephemeral
// ports for the connections from one source address, and a loopback
// backlog for the packets in flight.
func (b *bench) raiseLimits(nshards int) error {
	cfg := &b.cfg
	if used, fmax, err := fileHandles(); err == nil {
		need := used + 2*uint64(cfg.total) + uint64(2*nshards*reserveFDs)
		if need > fmax {
			if _, err := b.limits.atLeast("fs.file-max", need+need/20); err != nil {
				return fmt.Errorf("%d connections need %d file handles, and the system has %d of its %d (fs.file-max) free: %w",
					cfg.total, 2*cfg.total, fmax-used, fmax, err)
			}
		}
	}
	if cfg.network != netUnix {
		// Twice the connections per source address: connect() tries one
		// half of the range first (see perSource).
		if _, err := b.limits.portRange(2 * min(cfg.perShard, perSource) * 11 / 10); err != nil {
			return err
		}
	}
	if cfg.network != netUnix {
		// Loopback packets wait in a per-CPU backlog of
		// net.core.netdev_max_backlog packets (1,000 by default), dropped
		// beyond it: the clients' calls in flight (--window each), and
		// the server's keepalive probes (every 15 s per idle connection)
		// with their answers. A million connections dropped millions of
		// packets at 1,000; the probes' retries ran out and the server's
		// kernel reset the connections.
		if _, err := b.limits.atLeast("net.core.netdev_max_backlog", uint64(2*cfg.window*nshards+cfg.total/15)); err != nil {
			return err
		}
	}
	if f, ok, _ := readSysctl("net.netfilter.nf_conntrack_count"); ok && len(f) == 1 {
		b.ct0, _ = strconv.ParseUint(f[0], 10, 64)
	}
	return nil
}

// raiseConntrack makes room in the connection tracking table, if there is
// one and it tracks the run's connections (its count grew with them), for
// added more connections.
func (b *bench) raiseConntrack(added int) error {
	if b.cfg.network == netUnix {
		return nil
	}
	f, ok, err := readSysctl("net.netfilter.nf_conntrack_count")
	if err != nil || !ok || len(f) != 1 {
		return err
	}
	cnt, _ := strconv.ParseUint(f[0], 10, 64)
	open := 0
	for _, s := range b.shards {
		open += s.conns
	}
	if open > 0 && cnt < b.ct0+uint64(open/2) {
		return nil // the table does not track loopback connections
	}
	c, err := b.limits.atLeast("net.netfilter.nf_conntrack_max", cnt+uint64(added)+uint64(added/10)+1024)
	if c != nil {
		fmt.Fprintf(b.out, "kernel setting raised for the step: %s\n", c)
	}
	return err
}
