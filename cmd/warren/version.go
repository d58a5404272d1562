package main

import (
	"fmt"

	"github.com/warrenipc/warren/internal/buildinfo"
)

var versionHelp = help{
	usage: "warren version",
	text: `
Print warren's module version (a tag, a pseudo-version, or "(devel)" when
built from a source tree, as by go run), the version control revision and
commit time of the build when it recorded them, and the Go toolchain.
'warren --version' prints the same. A server reports its own in the
"version" object of Warren.Methods ('warren list --json ADDR').`,
	examples: `  warren version
  warren --version`,
}

func cmdVersion(e *env, args []string) error {
	if _, err := parseArgs(e, newFlagSet("version"), versionHelp, args, 0, 0); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "warren", buildinfo.Get())
	return nil
}
