package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// kubectlConflictAdvice is what kubectl (k8s.io/kubectl pkg/cmd/apply,
// unchanged from 1.32 to 1.37) adds after the server's message when a
// server-side apply conflicts.
const kubectlConflictAdvice = `Please review the fields above--they currently have other managers. Here
are the ways you can resolve this warning:
* If you intend to manage all of these fields, please re-run the apply
  command with the ` + "`--force-conflicts`" + ` flag.
* If you do not intend to manage all of the fields, please edit your
  manifest to remove references to the fields that should keep their
  current managers.
* You may co-own fields by updating your manifest to match the existing
  value; in this case, you'll become the manager if the other manager(s)
  stop managing the field (remove it from their configuration).
See https://kubernetes.io/docs/reference/using-api/server-side-apply/#conflicts`

// ssaManifest is ConfigMap ssa with data.
func ssaManifest(data string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: default\ndata:\n" + data
}

// runCode runs kubectl and returns stdout, stderr and the exit code; it
// fails the test if kubectl could not be run at all.
func (k *kubectlSession) runCode(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	out, errOut, err := kubectl(t, k.srv.kubeconfig, k.cacheDir, args...)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out, errOut, 0
	case errors.As(err, &exit):
		return out, errOut, exit.ExitCode()
	}
	t.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	return "", "", 0
}

// managedConfigMap reads ConfigMap name of namespace default with kubectl
// get -o json --show-managed-fields (kubectl leaves managedFields out
// without the flag).
func (k *kubectlSession) managedConfigMap(t *testing.T, name string) *corev1.ConfigMap {
	t.Helper()
	out := k.run(t, "get", "configmap", name, "-o", "json", "--show-managed-fields")
	var cm corev1.ConfigMap
	if err := json.Unmarshal([]byte(out), &cm); err != nil {
		t.Fatalf("kubectl get configmap %s -o json: decode: %v\n%s", name, err, out)
	}
	return &cm
}

// TestKubectlServerSideApply drives the real kubectl through server-side
// apply against the binary, as kube-apiserver answers it: create and
// change with apply --server-side (a field dropped from the manifest is
// removed), kubectl diff --server-side (exit 1, the change only, nothing
// written), a second field manager's conflict (exit 1 and kubectl's
// advice), --force-conflicts moving the ownership, and the managedFields
// kubectl get --show-managed-fields shows.
func TestKubectlServerSideApply(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	tmp := t.TempDir()
	srv := startConcord(t, "concord", t.TempDir(), "--data-dir", filepath.Join(tmp, "data"))
	k := &kubectlSession{srv: srv, cacheDir: filepath.Join(tmp, "kubectl-cache"), tmp: tmp}
	manifest := k.writeFile(t, "ssa.yaml", ssaManifest("  key: v1\n  mine: k\n"), 0o644)
	step := func(name string, f func(t *testing.T)) bool {
		ok := t.Run(name, f)
		if !ok {
			t.Logf("step %s failed", name)
		}
		return ok
	}
	const applied = "configmap/ssa serverside-applied\n"

	if !step("1-create", func(t *testing.T) {
		if out := k.run(t, "apply", "--server-side", "-f", manifest); out != applied {
			t.Errorf("kubectl apply --server-side (create) printed %q; want %q", out, applied)
		}
		cm := k.managedConfigMap(t, "ssa")
		if !reflect.DeepEqual(cm.Data, map[string]string{"key": "v1", "mine": "k"}) {
			t.Errorf("after the first apply: data = %v; want map[key:v1 mine:k]", cm.Data)
		}
		// Server-side apply keeps no last-applied annotation.
		if _, ok := cm.Annotations[lastApplied]; ok {
			t.Errorf("after apply --server-side: annotations %v; want no %s", cm.Annotations, lastApplied)
		}
		// kubectl applies as manager "kubectl"; only the applied fields
		// are its (metadata.name and namespace are not tracked).
		if got := applyManagers(cm.ManagedFields); !reflect.DeepEqual(got, []string{"kubectl"}) {
			t.Errorf("after the first apply: Apply managers %q; want [kubectl]: %s", got, describeManaged(cm.ManagedFields))
		}
		wantApplyEntry(t, "after the first apply", cm.ManagedFields, "kubectl", "key", "mine")
		if len(cm.ManagedFields) != 1 {
			t.Errorf("after the first apply: managedFields %s; want kubectl's Apply entry only", describeManaged(cm.ManagedFields))
		}
	}) {
		return
	}

	step("2-change", func(t *testing.T) {
		k.writeFile(t, "ssa.yaml", ssaManifest("  key: v2\n  mine: k\n  extra: e\n"), 0o644)
		if out := k.run(t, "apply", "--server-side", "-f", manifest); out != applied {
			t.Errorf("kubectl apply --server-side (change) printed %q; want %q", out, applied)
		}
		cm := k.managedConfigMap(t, "ssa")
		if !reflect.DeepEqual(cm.Data, map[string]string{"key": "v2", "mine": "k", "extra": "e"}) {
			t.Errorf("after the second apply: data = %v; want map[extra:e key:v2 mine:k]", cm.Data)
		}
		wantApplyEntry(t, "after the second apply", cm.ManagedFields, "kubectl", "extra", "key", "mine")

		// A field the only manager that set it no longer applies is
		// removed.
		k.writeFile(t, "ssa.yaml", ssaManifest("  key: v2\n  mine: k\n"), 0o644)
		if out := k.run(t, "apply", "--server-side", "-f", manifest); out != applied {
			t.Errorf("kubectl apply --server-side (extra dropped) printed %q; want %q", out, applied)
		}
		cm = k.managedConfigMap(t, "ssa")
		if !reflect.DeepEqual(cm.Data, map[string]string{"key": "v2", "mine": "k"}) {
			t.Errorf("after applying without extra: data = %v; want map[key:v2 mine:k]", cm.Data)
		}
		wantApplyEntry(t, "after applying without extra", cm.ManagedFields, "kubectl", "key", "mine")
	})

	step("3-diff", func(t *testing.T) {
		before := k.managedConfigMap(t, "ssa")
		changed := k.writeFile(t, "ssa-v3.yaml", ssaManifest("  key: v3\n  mine: k\n"), 0o644)
		out, errOut, code := k.runCode(t, "diff", "--server-side", "-f", changed)
		if code != 1 {
			t.Errorf("kubectl diff --server-side of a changed manifest: exit code %d; want 1\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		// Only the changed line differs: managedFields are left out of the
		// diff, and a dry run keeps the resourceVersion.
		var changes []string
		for _, line := range strings.Split(out, "\n") {
			if (strings.HasPrefix(line, "-") || strings.HasPrefix(line, "+")) && !strings.HasPrefix(line, "---") && !strings.HasPrefix(line, "+++") {
				changes = append(changes, line)
			}
		}
		if want := []string{"-  key: v2", "+  key: v3"}; !reflect.DeepEqual(changes, want) {
			t.Errorf("kubectl diff --server-side changed lines %q; want %q\n%s", changes, want, out)
		}
		after := k.managedConfigMap(t, "ssa")
		if after.ResourceVersion != before.ResourceVersion || !reflect.DeepEqual(after.Data, before.Data) {
			t.Errorf("after kubectl diff --server-side: rv %s data %v; want unchanged (rv %s data %v)", after.ResourceVersion, after.Data, before.ResourceVersion, before.Data)
		}
		if !reflect.DeepEqual(after.ManagedFields, before.ManagedFields) {
			t.Errorf("after kubectl diff --server-side: managedFields %s; want unchanged %s", describeManaged(after.ManagedFields), describeManaged(before.ManagedFields))
		}

		// No difference: exit 0, nothing printed.
		if out, errOut, code := k.runCode(t, "diff", "--server-side", "-f", manifest); code != 0 || out != "" {
			t.Errorf("kubectl diff --server-side of the applied manifest: exit %d, printed %q (stderr %q); want 0 and nothing", code, out, errOut)
		}
	})

	other := k.writeFile(t, "ssa-other.yaml", ssaManifest("  key: theirs\n"), 0o644)
	step("4-conflict", func(t *testing.T) {
		before := k.managedConfigMap(t, "ssa")
		out, errOut, code := k.runCode(t, "apply", "--server-side", "--field-manager=other", "-f", other)
		if code != 1 {
			t.Errorf("kubectl apply --server-side --field-manager=other: exit code %d; want 1\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		// The server's message names an applier without its apiVersion
		// (kube's printManager adds "using v1" for an Update manager only).
		want := "error: Apply failed with 1 conflict: conflict with \"kubectl\": .data.key\n" + kubectlConflictAdvice + "\n"
		if out != "" || errOut != want {
			t.Errorf("kubectl apply of a conflicting field:\nstdout: %q\nstderr: %q\nwant nothing on stdout, and on stderr:\n%q", out, errOut, want)
		}
		after := k.managedConfigMap(t, "ssa")
		if after.ResourceVersion != before.ResourceVersion || after.Data["key"] != "v2" {
			t.Errorf("after the conflict: rv %s data %v; want unchanged (rv %s, key v2)", after.ResourceVersion, after.Data, before.ResourceVersion)
		}
	})

	step("5-force-conflicts", func(t *testing.T) {
		if out := k.run(t, "apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", other); out != applied {
			t.Errorf("kubectl apply --server-side --force-conflicts printed %q; want %q", out, applied)
		}
		cm := k.managedConfigMap(t, "ssa")
		if !reflect.DeepEqual(cm.Data, map[string]string{"key": "theirs", "mine": "k"}) {
			t.Errorf("after --force-conflicts: data = %v; want map[key:theirs mine:k]", cm.Data)
		}
		// data.key is other's now; kubectl keeps data.mine.
		wantApplyEntry(t, "after --force-conflicts", cm.ManagedFields, "other", "key")
		wantApplyEntry(t, "after --force-conflicts", cm.ManagedFields, "kubectl", "mine")
		if len(cm.ManagedFields) != 2 {
			t.Errorf("after --force-conflicts: managedFields %s; want kubectl's and other's Apply entries only", describeManaged(cm.ManagedFields))
		}

		// Now kubectl's own manifest conflicts with other.
		out, errOut, code := k.runCode(t, "apply", "--server-side", "-f", manifest)
		want := "error: Apply failed with 1 conflict: conflict with \"other\": .data.key\n" + kubectlConflictAdvice + "\n"
		if code != 1 || errOut != want {
			t.Errorf("kubectl apply --server-side of its manifest after other forced data.key: exit %d\nstdout: %q\nstderr: %q\nwant exit 1 and:\n%q", code, out, errOut, want)
		}
	})

	step("6-show-managed-fields", func(t *testing.T) {
		out := k.run(t, "get", "cm", "ssa", "-o", "yaml", "--show-managed-fields")
		for _, s := range []string{"managedFields:", "manager: kubectl", "manager: other", "operation: Apply", "fieldsType: FieldsV1", "f:data:", "f:key: {}", "f:mine: {}"} {
			if !strings.Contains(out, s) {
				t.Errorf("kubectl get cm ssa -o yaml --show-managed-fields does not contain %q:\n%s", s, out)
			}
		}
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal([]byte(out), &cm); err != nil {
			t.Fatalf("decode kubectl get -o yaml: %v\n%s", err, out)
		}
		wantApplyEntry(t, "kubectl get --show-managed-fields", cm.ManagedFields, "other", "key")
		wantApplyEntry(t, "kubectl get --show-managed-fields", cm.ManagedFields, "kubectl", "mine")
		for _, e := range cm.ManagedFields {
			if e.Operation != metav1.ManagedFieldsOperationApply {
				t.Errorf("kubectl get --show-managed-fields: entry %q operation %s; want Apply only", e.Manager, e.Operation)
			}
		}
		// Without the flag kubectl leaves them out.
		if out := k.run(t, "get", "cm", "ssa", "-o", "yaml"); strings.Contains(out, "managedFields") {
			t.Errorf("kubectl get cm ssa -o yaml (no --show-managed-fields) shows managedFields:\n%s", out)
		}
	})

	srv.stopCleanly(t)
}

// TestKubectlServerSideApplyAfterClientSide: objects that other kubectl
// commands made, then applied server-side, as against kube-apiserver.
// One made by kubectl create is owned by its Update manager
// kubectl-create: a server-side apply of another value conflicts with it
// ("kubectl-create" using v1). One made by client-side kubectl apply moves
// to server-side apply without a conflict (kube's last-applied manager
// lets kubectl take the fields the annotation shows it applied); kubectl
// migrates the client-side manager's fields to "kubectl" (a JSON patch of
// managedFields), the server keeps the annotation up to date, and a field
// then dropped from the manifest is removed.
func TestKubectlServerSideApplyAfterClientSide(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	tmp := t.TempDir()
	srv := startConcord(t, "concord", t.TempDir(), "--data-dir", filepath.Join(tmp, "data"))
	k := &kubectlSession{srv: srv, cacheDir: filepath.Join(tmp, "kubectl-cache"), tmp: tmp}

	t.Run("after-create", func(t *testing.T) {
		k.run(t, "create", "configmap", "made", "--from-literal=a=1")
		cm := k.managedConfigMap(t, "made")
		e := managedBy(t, cm.ManagedFields, "kubectl-create", metav1.ManagedFieldsOperationUpdate)
		if e == nil || e.APIVersion != "v1" || e.Time == nil || !reflect.DeepEqual(ownedDataKeys(t, e), []string{"a"}) || len(cm.ManagedFields) != 1 {
			t.Errorf("after kubectl create: managedFields %s; want one Update entry of kubectl-create (v1, with a time) owning data.a", describeManaged(cm.ManagedFields))
		}
		manifest := k.writeFile(t, "made.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: made\ndata:\n  a: \"2\"\n", 0o644)
		out, errOut, code := k.runCode(t, "apply", "--server-side", "-f", manifest)
		want := "error: Apply failed with 1 conflict: conflict with \"kubectl-create\" using v1: .data.a\n" + kubectlConflictAdvice + "\n"
		if code != 1 || out != "" || errOut != want {
			t.Errorf("kubectl apply --server-side of a=2 over kubectl create's a=1: exit %d\nstdout: %q\nstderr: %q\nwant exit 1 and:\n%q", code, out, errOut, want)
		}
		if cm := k.managedConfigMap(t, "made"); cm.Data["a"] != "1" {
			t.Errorf("after the conflict: data %v; want a=1", cm.Data)
		}
	})

	t.Run("after-client-side-apply", func(t *testing.T) {
		manifest := k.writeFile(t, "csa.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: csa\ndata:\n  a: \"1\"\n  b: \"2\"\n", 0o644)
		if out := k.run(t, "apply", "-f", manifest); out != "configmap/csa created\n" {
			t.Errorf("kubectl apply (client-side) printed %q", out)
		}
		cm := k.managedConfigMap(t, "csa")
		if e := managedBy(t, cm.ManagedFields, "kubectl-client-side-apply", metav1.ManagedFieldsOperationUpdate); e == nil || !reflect.DeepEqual(ownedDataKeys(t, e), []string{"a", "b"}) {
			t.Fatalf("after client-side apply: managedFields %s; want kubectl-client-side-apply's Update entry owning data.a and data.b", describeManaged(cm.ManagedFields))
		}

		k.writeFile(t, "csa.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: csa\ndata:\n  a: \"10\"\n  b: \"2\"\n", 0o644)
		out, errOut, code := k.runCode(t, "apply", "--server-side", "-f", manifest)
		if code != 0 || out != "configmap/csa serverside-applied\n" || errOut != "" {
			t.Fatalf("kubectl apply --server-side over client-side apply: exit %d\nstdout: %q\nstderr: %q\nwant exit 0, %q and no warning", code, out, errOut, "configmap/csa serverside-applied\n")
		}
		cm = k.managedConfigMap(t, "csa")
		if !reflect.DeepEqual(cm.Data, map[string]string{"a": "10", "b": "2"}) {
			t.Errorf("after the server-side apply: data %v; want map[a:10 b:2]", cm.Data)
		}
		if e := managedBy(t, cm.ManagedFields, "kubectl-client-side-apply", metav1.ManagedFieldsOperationUpdate); e != nil {
			t.Errorf("after the server-side apply: managedFields %s; want kubectl-client-side-apply's entry migrated away", describeManaged(cm.ManagedFields))
		}
		if e := managedBy(t, cm.ManagedFields, "kubectl", metav1.ManagedFieldsOperationApply); e == nil || !reflect.DeepEqual(ownedDataKeys(t, e), []string{"a", "b"}) {
			t.Errorf("after the server-side apply: managedFields %s; want kubectl's Apply entry owning data.a and data.b", describeManaged(cm.ManagedFields))
		}
		var last map[string]any
		if err := json.Unmarshal([]byte(cm.Annotations[lastApplied]), &last); err != nil || !reflect.DeepEqual(last["data"], map[string]any{"a": "10", "b": "2"}) {
			t.Errorf("after the server-side apply: %s = %q (%v); want the applied manifest's data (a 10, b 2)", lastApplied, cm.Annotations[lastApplied], err)
		}

		// b dropped: kubectl was its only manager, so it goes.
		k.writeFile(t, "csa.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: csa\ndata:\n  a: \"10\"\n", 0o644)
		if out := k.run(t, "apply", "--server-side", "-f", manifest); out != "configmap/csa serverside-applied\n" {
			t.Errorf("kubectl apply --server-side without b printed %q", out)
		}
		if cm := k.managedConfigMap(t, "csa"); !reflect.DeepEqual(cm.Data, map[string]string{"a": "10"}) {
			t.Errorf("after applying without b: data %v; want map[a:10]; managedFields %s", cm.Data, describeManaged(cm.ManagedFields))
		}
	})
}
