package connbench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// raiseNoFile raises the soft limit on open files to the hard limit and
// returns the new soft limit.
func raiseNoFile() (uint64, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("getrlimit(RLIMIT_NOFILE): %w", err)
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			return 0, fmt.Errorf("setrlimit(RLIMIT_NOFILE, %d): %w", rl.Max, err)
		}
	}
	return rl.Cur, nil
}

// readKB reads "Name:   123 kB" lines of a /proc file (meminfo, status)
// into a map of bytes.
func readKB(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]uint64{}
	for line := range bytes.Lines(b) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		f := bytes.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && string(f[1]) == "kB" {
			n <<= 10
		}
		m[string(k)] = n
	}
	return m, nil
}

// memAvailable returns MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (uint64, error) {
	m, err := readKB("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	v, ok := m["MemAvailable"]
	if !ok {
		return 0, fmt.Errorf("/proc/meminfo has no MemAvailable")
	}
	return v, nil
}

// kernelFields are the /proc/meminfo fields whose growth is charged to the
// connections as kernel memory. Every socket is a struct file (filp), a
// dentry, a socket inode (sock_inode_cache) and the protocol's sock (UNIX),
// and each connection has two sockets; the server's epoll adds an epitem.
// All of them come from slab caches (Slab = SReclaimable + SUnreclaim); the
// buffers of messages in flight (sk_buff) do too. PageTables grows with the
// processes' memory. KernelStack grows with threads, not connections, and
// is left out.
var kernelFields = []string{"Slab", "PageTables"}

func kernelBytes(m map[string]uint64) uint64 {
	var n uint64
	for _, f := range kernelFields {
		n += m[f]
	}
	return n
}

// procMem is a process's resident memory: all of it, and its anonymous part
// (heap, stacks: without the binary's file-backed pages).
type procMem struct {
	RSS, Anon uint64
}

// selfMem collects garbage, returns free memory to the system and reads the
// process's resident memory.
func selfMem() (procMem, error) {
	runtime.GC()
	debug.FreeOSMemory()
	m, err := readKB("/proc/self/status")
	if err != nil {
		return procMem{}, err
	}
	return procMem{RSS: m["VmRSS"], Anon: m["RssAnon"]}, nil
}

// slabCaches reads /proc/slabinfo (root only) and returns the memory of
// each cache, in bytes: its slabs times their size. ok is false when the
// file cannot be read.
func slabCaches() (map[string]int64, bool) {
	f, err := os.Open("/proc/slabinfo")
	if err != nil {
		return nil, false
	}
	defer f.Close()
	page := int64(os.Getpagesize())
	m := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// name active_objs num_objs objsize objperslab pagesperslab : tunables ... : slabdata active_slabs num_slabs sharedavail
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, "slabinfo") {
			continue
		}
		head, slab, ok := strings.Cut(line, ": slabdata")
		if !ok {
			continue
		}
		hf, sf := strings.Fields(head), strings.Fields(slab)
		if len(hf) < 6 || len(sf) < 2 {
			continue
		}
		pages, err1 := strconv.ParseInt(hf[5], 10, 64)
		slabs, err2 := strconv.ParseInt(sf[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		m[hf[0]] = slabs * pages * page
	}
	return m, len(m) > 0
}

// fileHandles returns the system's allocated file handles and their limit
// (/proc/sys/fs/file-nr).
func fileHandles() (used, max uint64, err error) {
	b, err := os.ReadFile("/proc/sys/fs/file-nr")
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, 0, fmt.Errorf("/proc/sys/fs/file-nr: unexpected %q", b)
	}
	used, err1 := strconv.ParseUint(f[0], 10, 64)
	max, err2 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("/proc/sys/fs/file-nr: unexpected %q", b)
	}
	return used, max, nil
}

// socketCaches are the slab caches a connection allocates from: per socket
// (two per connection) the protocol's sock (UNIX-STREAM, UNIX on older
// kernels; TCP), the socket inode, its dentry and its struct file; per
// connection the server's epoll item and its wait-queue hook.
var socketCaches = []string{"UNIX-STREAM", "UNIX", "TCP", "sock_inode_cache", "dentry", "filp", "eventpoll_epi", "eventpoll_pwq"}

// slabGroups maps each name in /sys/kernel/slab to its cache: SLUB merges
// caches of like size and flags into one, which /proc/slabinfo lists under
// one of their names only (UNIX-STREAM may appear as signal_cache). Names
// are symlinks to the merged cache; an unmerged cache is a directory and
// its own group. It returns nil if /sys/kernel/slab cannot be read.
func slabGroups() map[string]string {
	const dir = "/sys/kernel/slab"
	ents, err := os.ReadDir(dir)
	if err != nil && len(ents) == 0 { // caches come and go while it is read: take what there is
		return nil
	}
	g := make(map[string]string, len(ents))
	for _, e := range ents {
		name := e.Name()
		g[name] = name
		if e.Type()&os.ModeSymlink != 0 {
			if t, err := os.Readlink(filepath.Join(dir, name)); err == nil {
				g[name] = filepath.Base(t)
			}
		}
	}
	return g
}

// slabAliases returns the names in want that share cache's group (itself
// included only if it is in want).
func slabAliases(groups map[string]string, cache string, want []string) []string {
	var as []string
	grp, ok := groups[cache]
	if !ok {
		return nil
	}
	for _, w := range want {
		if g, ok := groups[w]; ok && g == grp {
			as = append(as, w)
		}
	}
	return as
}
