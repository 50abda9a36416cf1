package app

import (
	"bytes"
	"crypto/x509"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubeAPIServerFlags: envtest's command line parses; --secure-port is
// --port; each kube-only flag given is recorded and logged once, with its
// value; a malformed boolean and an unknown flag are refused by name.
func TestKubeAPIServerFlags(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("concord", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.AddFlags(fs)
	err := fs.Parse([]string{"--allow-privileged=true", "--authorization-mode=RBAC", "--bind-address=127.0.0.1", "--cert-dir=/tmp/x",
		"--client-ca-file=/tmp/x/ca.crt", "--disable-admission-plugins=ServiceAccount", "--etcd-servers=http://127.0.0.1:2379",
		"--secure-port=6443", "--service-account-issuer=https://127.0.0.1:6443/", "--service-account-key-file=/tmp/x/sa.crt",
		"--service-account-signing-key-file=/tmp/x/sa.key", "--service-cluster-ip-range=10.0.0.0/24", "--advertise-address", "10.0.0.1",
		"--enable-admission-plugins", "NamespaceLifecycle,ResourceQuota", "--service-node-port-range=30000-32767", "--allow-privileged"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Port != 6443 || cfg.Security.CertDir != "/tmp/x" || cfg.Security.AuthorizationMode != "RBAC" {
		t.Errorf("port %d, cert dir %q, authorization %q; want 6443, /tmp/x, RBAC", cfg.Port, cfg.Security.CertDir, cfg.Security.AuthorizationMode)
	}
	want := []string{"allow-privileged=true", "disable-admission-plugins=ServiceAccount", "service-cluster-ip-range=10.0.0.0/24",
		"advertise-address=10.0.0.1", "enable-admission-plugins=NamespaceLifecycle,ResourceQuota", "service-node-port-range=30000-32767", "allow-privileged=true"}
	var got []string
	for _, f := range cfg.IgnoredFlags {
		got = append(got, f.name+"="+f.value)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ignored flags %q; want %q", got, want)
	}
	var out bytes.Buffer
	cfg.logIgnoredFlags(slog.New(slog.NewTextHandler(&out, nil)))
	if n := strings.Count(out.String(), `msg="kube-apiserver flag ignored: it has no meaning in Concord" flag=--`); n != len(want) ||
		!strings.Contains(out.String(), `flag=--service-cluster-ip-range value=10.0.0.0/24 why="there are no Services to give cluster IPs"`) {
		t.Errorf("%d log lines; want %d, one per flag given:\n%s", n, len(want), out.String())
	}

	for _, tc := range []struct{ args, want string }{
		{"--allow-privileged=maybe", `invalid boolean value "maybe" for -allow-privileged`},
		{"--feature-gates=A=true", "flag provided but not defined: -feature-gates"},
		{"--insecure-port=0", "flag provided but not defined: -insecure-port"},
	} {
		cfg := DefaultConfig()
		fs := flag.NewFlagSet("concord", flag.ContinueOnError)
		var msg bytes.Buffer
		fs.SetOutput(&msg)
		cfg.AddFlags(fs)
		if err := fs.Parse([]string{tc.args}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error with %q", tc.args, err, tc.want)
		}
	}
	// --help lists them (envtest reads it).
	var help bytes.Buffer
	fs.SetOutput(&help)
	fs.PrintDefaults()
	for _, name := range []string{"-secure-port", "-allow-privileged", "-service-cluster-ip-range", "-enable-admission-plugins", "-disable-admission-plugins"} {
		if !strings.Contains(help.String(), "  "+name) {
			t.Errorf("--help lacks %s", name)
		}
	}
}

// TestServingCertificateOfCertDir: without --tls-cert-file, --cert-dir's
// apiserver.crt and apiserver.key are served, as kube-apiserver does (no CA
// is generated then); one of them alone is an error naming --cert-dir.
func TestServingCertificateOfCertDir(t *testing.T) {
	pki := newTestPKI(t)
	dir := t.TempDir()
	copyFile(t, pki.serverCert, filepath.Join(dir, kubeServingCert))
	copyFile(t, pki.serverKey, filepath.Join(dir, kubeServingKey))
	cfg := DefaultConfig()
	cfg.EtcdServers = []string{"http://127.0.0.1:2379"}
	cfg.Security.CertDir = dir
	cfg.Complete()
	sec, err := cfg.buildSecurity(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(sec.tls.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Subject.CommonName != "server" {
		t.Errorf("served certificate %q; want apiserver.crt's, CN=server", leaf.Subject.CommonName)
	}
	if _, err := os.Stat(filepath.Join(dir, pkiCAFile)); !os.IsNotExist(err) {
		t.Errorf("stat %s: %v; want no CA generated", pkiCAFile, err)
	}

	if err := os.Remove(filepath.Join(dir, kubeServingKey)); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.buildSecurity(slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "--cert-dir "+dir) {
		t.Errorf("apiserver.crt without apiserver.key: %v; want an error naming --cert-dir", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
