package apisurface

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Size limits of the library code (Go files that are not tests and not
// generated, outside the nested modules bench/ and interop/ and outside
// testdata/): a file of more than maxFileLines lines or a package of more
// than maxPackageLines has grown past one concern.
const (
	maxFileLines    = 700
	maxPackageLines = 4500
)

func TestLibrarySize(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	perPkg := map[string]int{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel == "bench", rel == "interop", d.Name() == "testdata", d.Name() == "node_modules",
				strings.HasPrefix(d.Name(), ".") && rel != ".":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		n, generated, err := countLines(path)
		if err != nil || generated {
			return err
		}
		if n > maxFileLines {
			t.Errorf("%s: %d lines (at most %d)", rel, n, maxFileLines)
		}
		perPkg[filepath.Dir(rel)] += n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for pkg, n := range perPkg {
		if n > maxPackageLines {
			t.Errorf("package %s: %d library lines (at most %d)", pkg, n, maxPackageLines)
		}
	}
	if perPkg["rpc"] == 0 {
		t.Fatal("no library lines counted in rpc: the walk is broken")
	}
}

// countLines returns the lines of a Go file and whether it says it is
// generated ("// Code generated ... DO NOT EDIT." before the package clause).
func countLines(path string) (int, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n, generated, header := 0, false, true
	for sc.Scan() {
		n++
		line := sc.Text()
		if header {
			if strings.HasPrefix(line, "package ") {
				header = false
			} else if strings.HasPrefix(line, "// Code generated ") && strings.HasSuffix(line, " DO NOT EDIT.") {
				generated = true
			}
		}
	}
	return n, generated, sc.Err()
}
