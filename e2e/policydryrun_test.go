package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const requireOwnerPolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: require-owner
spec:
  failurePolicy: Fail
  matchConstraints:
    matchPolicy: Equivalent
    namespaceSelector: {}
    objectSelector: {}
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["configmaps"]
      scope: "*"
  validations:
  - expression: "has(object.metadata.labels) && 'owner' in object.metadata.labels"
    message: "every ConfigMap needs an owner label"
`

// requireOwnerBinding binds require-owner in the namespaces labelled
// team=payments, with validationActions actions.
func requireOwnerBinding(name, policy, actions string) string {
	return `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: ` + name + `
spec:
  policyName: ` + policy + `
  validationActions: ` + actions + `
  matchResources:
    matchPolicy: Equivalent
    namespaceSelector:
      matchLabels:
        team: payments
    objectSelector: {}
`
}

// TestKubectlPolicyDryRun: kubectl apply --dry-run=server of a
// ValidatingAdmissionPolicyBinding prints, as warnings, the stored
// ConfigMaps its policy would deny in the namespaces it selects, and the
// summary; nothing is stored. A binding of a policy not stored gets one
// warning; a binding applied for real none, and a dry-run apply that
// changes it the same warnings as a create.
func TestKubectlPolicyDryRun(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	tmp := t.TempDir()
	srv := startConcord(t, "concord", t.TempDir(), "--data-dir", filepath.Join(tmp, "data"))
	k := &kubectlSession{srv: srv, cacheDir: filepath.Join(tmp, "kubectl-cache"), tmp: tmp}

	for _, args := range [][]string{
		{"create", "namespace", "payments"},
		{"label", "namespace", "payments", "team=payments"},
		{"create", "namespace", "sandbox"},
		{"-n", "payments", "create", "configmap", "settings", "--from-literal=a=1"},
		{"-n", "payments", "create", "configmap", "limits", "--from-literal=a=1"},
		{"-n", "payments", "label", "configmap", "limits", "owner=alice"},
		{"-n", "payments", "create", "configmap", "cache", "--from-literal=a=1"},
		{"-n", "sandbox", "create", "configmap", "scratch", "--from-literal=a=1"},
		{"apply", "-f", k.writeFile(t, "policy.yaml", requireOwnerPolicy, 0o600)},
	} {
		k.run(t, args...)
	}
	deny := k.writeFile(t, "binding.yaml", requireOwnerBinding("require-owner", "require-owner", "[Deny]"), 0o600)
	warnings := strings.Join([]string{
		"Warning: dry run of ValidatingAdmissionPolicyBinding 'require-owner': would deny configmaps payments/cache: ValidatingAdmissionPolicy 'require-owner' with binding 'require-owner' denied request: every ConfigMap needs an owner label",
		"Warning: dry run of ValidatingAdmissionPolicyBinding 'require-owner': would deny configmaps payments/settings: ValidatingAdmissionPolicy 'require-owner' with binding 'require-owner' denied request: every ConfigMap needs an owner label",
		"Warning: dry run of ValidatingAdmissionPolicyBinding 'require-owner': checked 3 objects, 2 would be denied",
	}, "\n") + "\n"
	const kind = "validatingadmissionpolicybinding.admissionregistration.k8s.io"

	tests := []struct {
		name             string
		args             []string
		wantOut, wantErr string
	}{{
		name:    "dry-run apply creating",
		args:    []string{"apply", "--dry-run=server", "-f", deny},
		wantOut: kind + "/require-owner created (server dry run)\n",
		wantErr: warnings,
	}, {
		name:    "dry-run create",
		args:    []string{"create", "--dry-run=server", "-f", deny},
		wantOut: kind + "/require-owner created (server dry run)\n",
		wantErr: warnings,
	}, {
		name:    "policy not stored",
		args:    []string{"create", "--dry-run=server", "-f", k.writeFile(t, "orphan.yaml", requireOwnerBinding("orphan", "nope", "[Deny]"), 0o600)},
		wantOut: kind + "/orphan created (server dry run)\n",
		wantErr: "Warning: dry run of ValidatingAdmissionPolicyBinding 'orphan': ValidatingAdmissionPolicy 'nope' not found, nothing checked\n",
	}, {
		name:    "apply for real",
		args:    []string{"apply", "-f", k.writeFile(t, "warn.yaml", requireOwnerBinding("require-owner", "require-owner", "[Warn, Audit]"), 0o600)},
		wantOut: kind + "/require-owner created\n",
	}, {
		name:    "dry-run apply changing it",
		args:    []string{"apply", "--dry-run=server", "-f", deny},
		wantOut: kind + "/require-owner configured (server dry run)\n",
		wantErr: warnings,
	}}
	for _, tc := range tests {
		out, errOut, code := k.runCode(t, tc.args...)
		if code != 0 || out != tc.wantOut || errOut != tc.wantErr {
			t.Errorf("%s: kubectl %s: exit %d, stdout %q, stderr %q; want exit 0, stdout %q, stderr %q", tc.name, strings.Join(tc.args, " "), code, out, errOut, tc.wantOut, tc.wantErr)
		}
	}
	// Only the binding applied for real is stored, as it was applied.
	if out := k.run(t, "get", "validatingadmissionpolicybindings", "-o", "custom-columns=NAME:.metadata.name,ACTIONS:.spec.validationActions", "--no-headers"); out != "require-owner   [Warn Audit]\n" {
		t.Errorf("stored bindings: %q; want %q", out, "require-owner   [Warn Audit]\n")
	}
}
