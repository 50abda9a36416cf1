package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/concord-dev/concord/internal/syncbuf"
)

// testPKI is a CA with a serving certificate for 127.0.0.1 and a client
// certificate, as PEM files.
type testPKI struct {
	caFile                string
	serverCert, serverKey string
	clientCert, clientKey string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "concord test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p := testPKI{caFile: filepath.Join(dir, "ca.pem")}
	writePEM(t, p.caFile, "CERTIFICATE", caDER)

	issue := func(name string, serial int64, usage []x509.ExtKeyUsage) (certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	p.serverCert, p.serverKey = issue("server", 2, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	p.clientCert, p.clientKey = issue("client", 3, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	return p
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startTLSEtcd runs an etcd that serves clients over TLS only and requires
// a client certificate signed by p's CA; it returns its https:// URL.
func startTLSEtcd(t *testing.T, p testPKI) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "tls"
	cfg.Dir = t.TempDir()
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"/dev/null"}
	client := url.URL{Scheme: "https", Host: "127.0.0.1:0"}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: p.serverCert, KeyFile: p.serverKey, TrustedCAFile: p.caFile, ClientCertAuth: true}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start TLS etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("TLS etcd: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("TLS etcd not ready after a minute")
	}
	return "https://" + e.Clients[0].Addr().String()
}

// startRun builds and runs the server as main does, until the returned
// cancel; done receives Run's result.
func startRun(t *testing.T, cfg Config, logs io.Writer) (baseURL string, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cfg.Complete()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv, err := New(ctx, cfg, WithLogger(newLogger(cfg.LogFormat, logs)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	result := make(chan error, 1)
	go func() { result <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
		return srv.URL(), cancel, result
	case err := <-result:
		t.Fatalf("Run ended before it was ready: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("Run not ready after a minute")
	}
	return "", nil, nil
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read: %v", u, err)
	}
	return resp.StatusCode, string(body)
}

// TestRunOverTLSEtcdShutsDownInOrder runs the server over an etcd that
// requires TLS client certificates, then sends it the shutdown signal:
// /readyz fails first, the server keeps serving for
// --shutdown-delay-duration, then stops (ending the open watch) and run
// returns nil.
func TestRunOverTLSEtcdShutsDownInOrder(t *testing.T) {
	pki := newTestPKI(t)
	cfg := DefaultConfig()
	cfg.EtcdServers = []string{startTLSEtcd(t, pki)}
	cfg.EtcdCAFile, cfg.EtcdCertFile, cfg.EtcdKeyFile = pki.caFile, pki.clientCert, pki.clientKey
	cfg.Port = 0
	cfg.DataDir = t.TempDir()
	cfg.WriteKubeconfig = filepath.Join(cfg.DataDir, "kubeconfig.yaml")
	const delay = 1500 * time.Millisecond
	cfg.ShutdownDelayDuration = delay
	openServing(&cfg)
	logs := &syncbuf.Buffer{}
	base, stop, done := startRun(t, cfg, logs)

	// Ready once the stored CRDs (none) are served, within moments.
	code, body := get(t, base+"/readyz?verbose")
	for deadline := time.Now().Add(10 * time.Second); code != 200 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		code, body = get(t, base+"/readyz?verbose")
	}
	if code != 200 || body != "[+]ping ok\n[+]etcd ok\n[+]poststarthook/start-system-namespaces-controller ok\n[+]poststarthook/crd-informer-synced ok\n[+]shutdown ok\nreadyz check passed\n" {
		t.Fatalf("GET /readyz?verbose = %d %q; want 200 with every check ok", code, body)
	}
	resp, err := http.Post(base+"/api/v1/namespaces/default/configmaps", "application/json", strings.NewReader(`{"metadata":{"name":"tls"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST configmap over TLS etcd = %d; want 201", resp.StatusCode)
	}

	// The process's own metrics are served with the API's.
	_, metrics := get(t, base+"/metrics")
	for _, series := range []string{
		"go_goroutines ",
		"process_cpu_seconds_total ",
		"concord_etcd_compactions_total 0\n",
		"concord_etcd_compacted_revision 0\n",
		`etcd_request_duration_seconds_count{group="",operation="create",resource="configmaps"} 1` + "\n",
		`apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="POST",version="v1"} 1` + "\n",
	} {
		if !strings.Contains(metrics, series) {
			t.Errorf("/metrics has no %q", series)
		}
	}

	watchCtx, cancelWatch := context.WithTimeout(context.Background(), time.Minute)
	defer cancelWatch()
	req, err := http.NewRequestWithContext(watchCtx, http.MethodGet, base+"/api/v1/namespaces/default/configmaps?watch=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	watch, err := http.DefaultClient.Do(req)
	if err != nil || watch.StatusCode != http.StatusOK {
		t.Fatalf("watch: %v %v", watch, err)
	}
	defer watch.Body.Close()
	watchEnded := make(chan time.Time, 1)
	go func() {
		_, _ = io.Copy(io.Discard, watch.Body)
		watchEnded <- time.Now()
	}()

	stop() // SIGTERM
	signalled := time.Now()

	deadline := time.Now().Add(time.Second)
	for {
		code, body := get(t, base+"/readyz")
		if code == http.StatusInternalServerError {
			if want := "[+]ping ok\n[+]etcd ok\n[+]poststarthook/start-system-namespaces-controller ok\n[+]poststarthook/crd-informer-synced ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n"; body != want {
				t.Errorf("shutting down: GET /readyz = %q; want %q", body, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /readyz = %d %q a second after the signal; want 500", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Still serving while load balancers notice.
	if code, body := get(t, base+"/livez"); code != 200 || body != "ok" {
		t.Errorf("during the shutdown delay: GET /livez = %d %q; want 200 ok", code, body)
	}
	if code, body := get(t, base+"/api/v1/namespaces/default/configmaps/tls"); code != 200 {
		t.Errorf("during the shutdown delay: GET configmap = %d %s; want 200", code, body)
	}
	select {
	case <-watchEnded:
		t.Errorf("the watch ended %s after the signal; want it open during the shutdown delay", time.Since(signalled))
	default:
	}

	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v; want nil after a clean shutdown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of the signal")
	}
	if took := time.Since(signalled); took < delay {
		t.Errorf("run returned %s after the signal; want at least --shutdown-delay-duration %s", took, delay)
	}
	select {
	case at := <-watchEnded:
		if at.Sub(signalled) < delay {
			t.Errorf("the watch ended %s after the signal; want after the %s delay", at.Sub(signalled), delay)
		}
	case <-time.After(5 * time.Second):
		t.Error("the watch was still open after run returned")
	}
	if _, err := http.Get(base + "/livez"); err == nil {
		t.Error("GET /livez after run returned: the server still answers")
	}
	logText := logs.String()
	delayAt, stoppedAt := strings.Index(logText, "/readyz fails now"), strings.Index(logText, `"msg":"stopped"`)
	if delayAt < 0 || stoppedAt < delayAt {
		t.Errorf("log lacks the shutdown steps in order (readyz fails, then stopped):\n%s", logText)
	}
}

// TestRunEtcdTLSRefused: the TLS settings are really used. An etcd that
// requires client certificates refuses a server without one, and a server
// does not trust an etcd whose certificate another CA signed.
func TestRunEtcdTLSRefused(t *testing.T) {
	pki, other := newTestPKI(t), newTestPKI(t)
	endpoint := startTLSEtcd(t, pki)
	tests := []struct {
		name          string
		ca, cert, key string
	}{
		{"no client certificate", pki.caFile, "", ""},
		{"etcd signed by an unknown CA", other.caFile, pki.clientCert, pki.clientKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.EtcdServers = []string{endpoint}
			cfg.EtcdCAFile, cfg.EtcdCertFile, cfg.EtcdKeyFile = tc.ca, tc.cert, tc.key
			cfg.Port = 0
			cfg.DataDir = t.TempDir()
			cfg.EtcdDialTimeout = time.Second
			cfg.Complete()
			if err := cfg.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv, err := New(ctx, cfg, WithLogger(newLogger(cfg.LogFormat, io.Discard)))
			if err == nil || !strings.Contains(err.Error(), "did not answer") {
				t.Errorf("New = %v, %v; want etcd did not answer", srv, err)
			}
		})
	}
}
