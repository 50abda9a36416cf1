package layering

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// layers are the module's layers, top first: a package may import its own
// layer or those below it.
var layers = []string{"cmd", "apiserver", "registry", "etcdstore"}

// standalone are the top-level folders outside the layers: they import
// none of the layers (only themselves and internal/), and nothing imports
// them. internal/ is importable from anywhere.
var standalone = []string{"internal", "e2e", "docs", "deploy"}

// etcdstoreImporters may import etcdstore although they are above
// registry, the layer that otherwise stands between the API and etcd.
var etcdstoreImporters = []string{
	// The composition root: it starts etcd and gives the stores their
	// storage.
	"cmd/",
}

// topFiles are the files the module's root may hold besides its folders
// and dot entries (.git, .ci, .gitignore).
var topFiles = []string{"go.mod", "go.sum", "Makefile", "README.md"}

// top is the top-level folder of a package path relative to the module.
func top(pkg string) string {
	first, _, _ := strings.Cut(pkg, "/")
	return first
}

// violation says why the import from → to (package paths relative to the
// module) goes the wrong way; "" when it does not.
func violation(from, to string) string {
	ft, tt := top(from), top(to)
	if ft == tt {
		return ""
	}
	if slices.Contains(standalone, ft) {
		if tt == "internal" {
			return ""
		}
		return fmt.Sprintf("%s/ imports nothing of the module but internal/", ft)
	}
	if tt == "internal" {
		return ""
	}
	fi, ti := slices.Index(layers, ft), slices.Index(layers, tt)
	switch {
	case fi < 0:
		return fmt.Sprintf("%s/ is not a known folder", ft)
	case ti < 0:
		return fmt.Sprintf("%s/ is not importable from the layers", tt)
	case ti < fi:
		return fmt.Sprintf("climbs from %s up to %s", ft, tt)
	case tt == "etcdstore" && ft != "registry" && !allowedEtcdstoreImporter(from):
		return fmt.Sprintf("skips registry: only registry and %v import etcdstore", etcdstoreImporters)
	}
	return ""
}

func allowedEtcdstoreImporter(pkg string) bool {
	for _, p := range etcdstoreImporters {
		if pkg == p || strings.HasSuffix(p, "/") && strings.HasPrefix(pkg, p) {
			return true
		}
	}
	return false
}

func TestViolation(t *testing.T) {
	tests := []struct {
		from, to string
		wrong    bool
	}{
		{"registry", "apiserver/filters", true},              // climbs
		{"registry/crdserving", "cmd/concord", true},         // climbs
		{"apiserver/filters", "etcdstore", true},             // skips
		{"apiserver", "etcdstore/etcdtest", true},            // skips
		{"internal/procfs", "registry", true},                // internal reaches into a layer
		{"e2e", "apiserver", true},                           // e2e drives binaries
		{"docs/examples/retryclient", "registry", true},      // so do the examples
		{"deploy/etcd", "etcdstore", true},                   // and deploy
		{"registry", "e2e", true},                            // nothing imports e2e
		{"apiserver/authorization/rbac", "etcdstore", true},  // the RBAC view reads etcd through registry
		{"cmd/concord", "apiserver", false},                  // down one
		{"cmd/concord", "registry/crdserving", false},        // down two, not to etcdstore
		{"cmd/concord/app", "etcdstore", false},              // the composition root
		{"apiserver", "registry", false},                     // down one
		{"registry", "etcdstore", false},                     // down one
		{"registry/controller/namespace", "registry", false}, // the same layer
		{"etcdstore", "internal/procfs", false},              // internal from anywhere
		{"e2e/crmanager", "internal/syncbuf", false},         // also from e2e
		{"e2e", "e2e/crmanager", false},                      // its own folder
	}
	for _, tc := range tests {
		if got := violation(tc.from, tc.to); (got != "") != tc.wrong {
			t.Errorf("violation(%q, %q) = %q; want wrong: %v", tc.from, tc.to, got, tc.wrong)
		}
	}
}

// TestLayers checks every non-test import between the module's packages
// and logs the arrows between top-level folders.
func TestLayers(t *testing.T) {
	root, module := moduleRoot(t)
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	arrows := map[string]int{}
	packages := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		packages++
		from, ok := relative(fields[0], module)
		if !ok {
			t.Fatalf("go list named %s, outside module %s", fields[0], module)
		}
		for _, imp := range fields[1:] {
			to, ok := relative(imp, module)
			if !ok {
				continue // the standard library, a dependency
			}
			if why := violation(from, to); why != "" {
				t.Errorf("%s → %s: %s", from, to, why)
			}
			if top(from) != top(to) {
				arrows[top(from)+" → "+top(to)]++
			}
		}
	}
	if packages == 0 {
		t.Fatal("go list listed no packages")
	}
	keys := make([]string, 0, len(arrows))
	for k := range arrows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t.Logf("%s: %d", k, arrows[k])
	}
}

// TestTopLevel: the root holds the layers' and the standalone folders, the
// module's files, dot entries and what .gitignore keeps out (build outputs,
// local data).
func TestTopLevel(t *testing.T) {
	root, _ := moduleRoot(t)
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	ignored := ignoredAtTop(t, root)
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, "."), ignored[name]:
		case e.IsDir() && (slices.Contains(layers, name) || slices.Contains(standalone, name)):
		case !e.IsDir() && slices.Contains(topFiles, name):
		default:
			t.Errorf("%s at the top level: only %v, %v and the files %v belong there", name, layers, standalone, topFiles)
		}
	}
}

// moduleRoot is the directory of go.mod above the test's own, and the
// module's path.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			for line := range strings.Lines(string(data)) {
				if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
					return dir, strings.TrimSpace(m)
				}
			}
			t.Fatalf("%s/go.mod names no module", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// relative is pkg's path inside module; false when pkg is not the module's.
func relative(pkg, module string) (string, bool) {
	return strings.CutPrefix(pkg, module+"/")
}

// ignoredAtTop are the top-level names .gitignore anchors to the root
// ("/concord-data/").
func ignoredAtTop(t *testing.T, root string) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join(root, ".gitignore"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[string]bool{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if p, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "/"); ok && !strings.Contains(strings.TrimSuffix(p, "/"), "/") {
			names[strings.TrimSuffix(p, "/")] = true
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}
