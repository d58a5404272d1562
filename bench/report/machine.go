package report

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// CollectMachine describes this machine and the modules this binary was
// built with. repo is the warren checkout, for its git revision (best
// effort).
func CollectMachine(repo string, args []string) Machine {
	m := Machine{
		Date:       time.Now().UTC().Format(time.RFC3339),
		OS:         runtime.GOOS,
		Arch:       runtime.GOARCH,
		Cores:      runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion:  runtime.Version(),
		Modules:    map[string]string{},
		Args:       strings.Join(args, " "),
	}
	m.CPU = procField("/proc/cpuinfo", "model name")
	if kb, err := strconv.ParseUint(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal"), " kB"), 10, 64); err == nil {
		m.MemoryBytes = kb << 10
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAvg = strings.TrimSpace(string(b))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if !tracked(d.Path) {
				continue
			}
			v := d.Version
			if d.Replace != nil {
				v = "replaced by " + d.Replace.Path
				if d.Replace.Version != "" && d.Replace.Version != "(devel)" {
					v += "@" + d.Replace.Version
				}
			}
			m.Modules[d.Path] = v
		}
	}
	m.WarrenRevision = gitRevision(repo)
	return m
}

// tracked are the modules whose versions the results depend on.
func tracked(path string) bool {
	switch path {
	case "github.com/warrenipc/warren", "google.golang.org/grpc", "github.com/containerd/ttrpc",
		"storj.io/drpc", "google.golang.org/protobuf", "golang.org/x/net",
		"github.com/lesismal/nbio", "github.com/gobwas/ws":
		return true
	}
	return false
}

// procField returns the value of the first "key: value" line of a /proc
// file, or "".
func procField(file, key string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// gitRevision reads the checkout's revision with read-only git commands
// (--no-optional-locks: status must not even refresh the index).
func gitRevision(repo string) string {
	out, err := exec.Command("git", "-C", repo, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "--no-optional-locks", "-C", repo, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		rev += "+dirty"
	}
	return rev
}
