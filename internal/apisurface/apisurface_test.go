// Package apisurface holds a test that keeps the library's public API small:
// the library packages together export at most maxExported names.
package apisurface

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// maxExported bounds the exported names of all library packages together:
// exported top-level names plus exported methods of exported types, in
// packages that are not internal, not main, and not under bench, interop,
// examples, cmd or clients.
const maxExported = 300

// skipDirs are the top-level directories that hold applications, nested
// modules or data rather than library packages.
var skipDirs = map[string]bool{
	"bench": true, "interop": true, "examples": true, "cmd": true,
	"clients": true, "internal": true, "testdata": true,
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExportedNames(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	counts, err := exportedNames(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) == 0 {
		t.Fatal("no library packages found under", root)
	}
	total := 0
	dirs := make([]string, 0, len(counts))
	for dir, names := range counts {
		total += len(names)
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	var b strings.Builder
	for _, dir := range dirs {
		b.WriteString("  " + dir + ": " + strconv.Itoa(len(counts[dir])) + "\n")
	}
	t.Logf("exported names: %d (limit %d)\n%s", total, maxExported, b.String())
	if total > maxExported {
		t.Errorf("the library packages export %d names, more than %d:\n%s", total, maxExported, b.String())
	}
}

// exportedNames returns, for each library package directory under root
// (relative, slash-separated), the set of its exported names: "Name" for a
// top-level declaration and "Type.Method" for a method, including the
// exported methods an exported struct type gets from an embedded field of
// an unexported type of its package (they are in its method set, and go
// doc lists them).
func exportedNames(root string) (map[string]map[string]bool, error) {
	counts := map[string]map[string]bool{}
	methods := map[string]map[string][]string{} // dir -> receiver type -> exported methods
	embeds := map[string]map[string][]string{}  // dir -> exported type -> embedded unexported types
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			first, _, _ := strings.Cut(rel, "/")
			if skipDirs[first] || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "internal" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		names := counts[dir]
		if names == nil {
			names = map[string]bool{}
			counts[dir] = names
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if !decl.Name.IsExported() {
					continue
				}
				if decl.Recv == nil {
					names[decl.Name.Name] = true
					continue
				}
				recv := recvType(decl.Recv.List[0].Type)
				if ast.IsExported(recv) {
					names[recv+"."+decl.Name.Name] = true
				}
				if methods[dir] == nil {
					methods[dir] = map[string][]string{}
				}
				methods[dir][recv] = append(methods[dir][recv], decl.Name.Name)
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						if !spec.Name.IsExported() {
							continue
						}
						names[spec.Name.Name] = true
						st, ok := spec.Type.(*ast.StructType)
						if !ok {
							continue
						}
						for _, f := range st.Fields.List {
							if e := recvType(f.Type); len(f.Names) == 0 && e != "" && !ast.IsExported(e) {
								if embeds[dir] == nil {
									embeds[dir] = map[string][]string{}
								}
								embeds[dir][spec.Name.Name] = append(embeds[dir][spec.Name.Name], e)
							}
						}
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							if n.IsExported() {
								names[n.Name] = true
							}
						}
					}
				}
			}
		}
		return nil
	})
	for dir, types := range embeds {
		for typ, embedded := range types {
			for _, e := range embedded {
				for _, m := range methods[dir][e] {
					counts[dir][typ+"."+m] = true
				}
			}
		}
	}
	return counts, err
}

// recvType returns the name of a method's receiver type.
func recvType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
