package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFrom(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want Info
		str  string
	}{
		{"nil", nil, Info{Version: Devel}, "(devel) (built from source without version control information)"},
		{"go run in a clone", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: ModulePath, Version: "(devel)"}},
			Info{Version: Devel, Go: "go1.26.0"}, "(devel) (built from source without version control information) go1.26.0"},
		{"go build in a clone", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: ModulePath, Version: "v0.0.0-20261128190000-0123456789ab+dirty"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-28T19:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			Info{Version: "v0.0.0-20261128190000-0123456789ab+dirty", Revision: "0123456789abcdef0123", Time: "2026-11-28T19:00:00Z", Modified: true, Go: "go1.26.0"},
			"v0.0.0-20261128190000-0123456789ab+dirty (revision 0123456789ab with local changes, 2026-11-28T19:00:00Z) go1.26.0"},
		{"a dependency", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "example.com/app", Version: "(devel)"},
			Deps: []*debug.Module{{Path: "golang.org/x/sys", Version: "v0.1.0"}, {Path: ModulePath, Version: "v1.2.0"}}},
			Info{Version: "v1.2.0", Go: "go1.26.0"}, "v1.2.0 go1.26.0"},
		{"a replaced dependency", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{{Path: ModulePath, Version: "v1.2.0", Replace: &debug.Module{Path: "../warren"}}}},
			Info{Version: Devel, Go: "go1.26.0"}, "(devel) (built from source without version control information) go1.26.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := From(tc.bi)
			if tc.want.Go == "" {
				tc.want.Go = got.Go
			}
			tc.want.OS, tc.want.Arch = got.OS, got.Arch
			if got != tc.want {
				t.Fatalf("From = %+v, want %+v", got, tc.want)
			}
			if s := got.String(); !strings.HasPrefix(s, tc.str) {
				t.Errorf("String = %q, want prefix %q", s, tc.str)
			}
		})
	}
}

func TestGet(t *testing.T) {
	if in := Get(); in.Go == "" || in.Version == "" {
		t.Fatalf("Get = %+v", in)
	}
}
