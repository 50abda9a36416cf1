package app

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateEncryptionProviderConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, resources string) string {
		path := filepath.Join(dir, name)
		cfg := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: " + resources +
			"\n  providers:\n  - aesgcm:\n      keys:\n      - name: key1\n        secret: " +
			"AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n  - identity: {}\n"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	valid := write("valid.yaml", "[secrets, leases.coordination.k8s.io]")
	typo := write("typo.yaml", "[secret]")
	missing := filepath.Join(dir, "missing.yaml")

	for _, tc := range []struct {
		path, wantErr string
	}{
		{valid, ""},
		{typo, "--encryption-provider-config: " + typo + `: resource "secret" is not served by Concord (served: namespaces, configmaps, secrets, serviceaccounts, leases.coordination.k8s.io, events, customresourcedefinitions.apiextensions.k8s.io, roles.rbac.authorization.k8s.io, clusterroles.rbac.authorization.k8s.io, rolebindings.rbac.authorization.k8s.io, clusterrolebindings.rbac.authorization.k8s.io, validatingwebhookconfigurations.admissionregistration.k8s.io, mutatingwebhookconfigurations.admissionregistration.k8s.io, validatingadmissionpolicies.admissionregistration.k8s.io, validatingadmissionpolicybindings.admissionregistration.k8s.io, mutatingadmissionpolicies.admissionregistration.k8s.io, mutatingadmissionpolicybindings.admissionregistration.k8s.io)`},
		{missing, "--encryption-provider-config: open " + missing + ": no such file or directory"},
	} {
		cfg := DefaultConfig()
		fs := flag.NewFlagSet("concord", flag.ContinueOnError)
		cfg.AddFlags(fs)
		if err := fs.Parse([]string{"--data-dir", dir, "--encryption-provider-config", tc.path}); err != nil {
			t.Fatal(err)
		}
		cfg.Complete()
		err := cfg.Validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("Validate with %s = %v; want nil", tc.path, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("Validate with %s = %v; want an error with %q", tc.path, err, tc.wantErr)
		}
	}
}
