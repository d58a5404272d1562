package connbench

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

func (b *bench) printHeader() {
	fmt.Fprintf(b.out, "%9s %6s %11s %17s %11s %11s %11s %11s %11s %11s %10s\n",
		"conns", "shards", "connect/s", "round (min-max)", "server B/c", "server anon", "kernel B/c", "sock slab", "client B/c", "avail B/c", "srv gorout")
}

func (b *bench) printRow(r row) {
	sock := "?"
	if r.kernelSock >= 0 {
		sock = fmt.Sprintf("%.0f", r.kernelSock)
	}
	fmt.Fprintf(b.out, "%9d %6d %11.0f %17s %11.0f %11.0f %11.0f %11s %11.0f %11.0f %10d\n",
		r.conns, r.shards, r.connectRate,
		fmt.Sprintf("%v-%v", r.roundMin.Round(time.Millisecond), r.roundMax.Round(time.Millisecond)),
		r.srvRSS, r.srvAnon, r.kernel, sock, r.cliRSS, r.availDrop, r.goroutines)
}

// report ends the output: the method, the kernel's slab caches that grew
// most at the last step measured, and whether the run completed.
func (b *bench) report(complete bool) {
	w := b.out
	if len(b.rows) == 0 {
		return
	}
	fmt.Fprint(w, `
Each round, every connection made one unary call (Conns.Tick, raw codec, 8 bytes each
way) on a new stream; every client checked every reply (its bytes echoed, status OK),
and each server's count of calls equalled its shard's connections, so their sum equalled
the connections. connect/s: connections opened per second, all clients together (connect
and preface exchange; each client has --window handshakes in flight). round: the time for
all the calls of a round. Per connection ("B/c"):
  server B/c   sum over the server processes of (VmRSS after runtime.GC and
               debug.FreeOSMemory - VmRSS before listening), over the connections;
               server anon is the same for RssAnon (heap and stacks, without the
               binary's file pages). Measured --settle after the last round.
  kernel B/c   growth of /proc/meminfo Slab + PageTables since before the first
               process started, over the connections. Each connection is two
               sockets (client and server ends), each a file, dentry, socket inode
               and protocol sock (unix or TCP) from slab caches, plus the server's
               epoll item; idle, no buffers are queued. System-wide: other activity
               on the machine is noise.
  sock slab    the part of that growth in the slab caches sockets use (/proc/slabinfo:
               UNIX-STREAM, TCP, sock_inode_cache, dentry, filp, eventpoll_epi/pwq, and the
               caches the kernel merged them into, per /sys/kernel/slab): less noisy.
  client B/c   the client processes' VmRSS growth (bare descriptors: 4 bytes each).
  avail B/c    the drop of MemAvailable since the start: everything, processes included.
  srv gorout   goroutines in all server processes.
`)
	if last := b.rows[len(b.rows)-1]; len(last.slab) > 0 {
		fmt.Fprintf(w, "\nSlab caches that grew most by %d connections (/proc/slabinfo), per connection:\n", last.conns)
		for _, s := range last.slab {
			merged := ""
			if len(s.aliases) > 0 && (len(s.aliases) > 1 || s.aliases[0] != s.name) {
				merged = " (holds " + strings.Join(s.aliases, ", ") + ")"
			}
			fmt.Fprintf(w, "  %-22s %8.0f B%s\n", s.name, float64(s.bytes)/float64(last.conns), merged)
		}
	}
	if complete {
		fmt.Fprintf(w, "\nAll %d connections were live in every round.\n", b.cfg.total)
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func atou(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}

func fmtBytes(v float64) string {
	switch {
	case v >= 1<<30:
		return fmt.Sprintf("%.1f GiB", v/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	}
	return fmt.Sprintf("%.0f B", v)
}
