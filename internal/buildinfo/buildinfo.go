// Package buildinfo reads the version of warren and of the program it is
// built into from the build information the Go toolchain embeds.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// ModulePath is warren's module path.
const ModulePath = "github.com/warrenipc/warren"

// Devel is the version of a module built from its source tree rather than
// fetched at a tagged or pseudo version (go run, go build in a clone
// without version control information).
const Devel = "(devel)"

// Info is a build's version information.
type Info struct {
	// Version is warren's module version: a tag such as v1.2.0, a
	// pseudo-version, or Devel.
	Version string
	// Revision and Time are the version control revision and commit time
	// of the program's source tree; empty when the build did not record
	// them (go run, -buildvcs=false). Modified reports uncommitted changes.
	Revision string
	Time     string
	Modified bool
	// Go is the toolchain version, as in go1.26.0, and OS/Arch the target.
	Go, OS, Arch string
}

var (
	once sync.Once
	info Info
)

// Get returns the running program's build information.
func Get() Info {
	once.Do(func() {
		bi, _ := debug.ReadBuildInfo()
		info = From(bi)
	})
	return info
}

// From extracts Info from bi, which may be nil.
func From(bi *debug.BuildInfo) Info {
	in := Info{Version: Devel, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi == nil {
		return in
	}
	if bi.GoVersion != "" {
		in.Go = bi.GoVersion
	}
	switch {
	case bi.Main.Path == ModulePath:
		in.Version = bi.Main.Version
	default:
		for _, d := range bi.Deps {
			if d.Path != ModulePath {
				continue
			}
			if d.Replace != nil {
				d = d.Replace
			}
			in.Version = d.Version
			break
		}
	}
	if in.Version == "" {
		in.Version = Devel
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is a one-line description, as in
// "v1.2.0 (revision 0123456789ab, 2026-01-02T03:04:05Z) go1.26.0 linux/amd64".
func (in Info) String() string {
	var b strings.Builder
	b.WriteString(in.Version)
	if in.Revision != "" {
		rev := in.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		fmt.Fprintf(&b, " (revision %s", rev)
		if in.Modified {
			b.WriteString(" with local changes")
		}
		if in.Time != "" {
			b.WriteString(", " + in.Time)
		}
		b.WriteString(")")
	} else if in.Version == Devel {
		b.WriteString(" (built from source without version control information)")
	}
	fmt.Fprintf(&b, " %s %s/%s", in.Go, in.OS, in.Arch)
	return b.String()
}
