package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// kubeVersion is the kube-apiserver BenchmarkEnvtest compares with.
const kubeVersion = "v1.37.2"

// BenchmarkEnvtest compares Concord with the real kube-apiserver as
// envtest's API server, interleaved in one run: each iteration runs, for
// each of them, envtest's Start() (to a client that has read the default
// namespace), a kubebuilder-style suite of 20 specs against a manager, and
// Stop(), and reads the API server's peak RSS. Both use the same etcd (this
// binary's). kube-apiserver is built from k8s.io/kubernetes@v1.37.2 the
// first time (minutes; kept in the user cache directory), or taken from
// $CONCORD_BENCH_KUBE_APISERVER; nothing of it runs in the default suite.
//
//	go test ./e2e -run '^$' -bench BenchmarkEnvtest -benchtime 5x
func BenchmarkEnvtest(b *testing.B) {
	ctrl.SetLogger(logr.Discard())
	kube := kubeAPIServerBinary(b)
	servers := []struct{ name, bin string }{{"concord", concordBin}, {"kube", kube}}
	assets := map[string]string{}
	for _, s := range servers {
		dir := filepath.Join(b.TempDir(), s.name)
		if out, err := exec.Command(concordBin, "envtest-assets", dir).CombinedOutput(); err != nil {
			b.Fatalf("envtest-assets: %v: %s", err, out)
		}
		if err := os.Remove(filepath.Join(dir, "kube-apiserver")); err != nil {
			b.Fatal(err)
		}
		if err := os.Symlink(s.bin, filepath.Join(dir, "kube-apiserver")); err != nil {
			b.Fatal(err)
		}
		assets[s.name] = dir
	}
	sums := map[string]*envtestRun{}
	for _, s := range servers {
		sums[s.name] = &envtestRun{}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, s := range servers {
			run := runEnvtestSuite(b, assets[s.name])
			b.Logf("%s: ready %.3fs, suite %.3fs, stop %.3fs, peak RSS %.1f MiB", s.name, run.ready.Seconds(), run.suite.Seconds(), run.stop.Seconds(), run.peakRSS)
			sums[s.name].add(run)
		}
	}
	b.StopTimer()
	n := float64(b.N)
	c, k := sums["concord"], sums["kube"]
	for _, s := range servers {
		r := sums[s.name]
		b.ReportMetric(r.ready.Seconds()/n, s.name+"-ready-s")
		b.ReportMetric(r.suite.Seconds()/n, s.name+"-20specs-s")
		b.ReportMetric(r.stop.Seconds()/n, s.name+"-stop-s")
		b.ReportMetric((r.ready+r.suite+r.stop).Seconds()/n, s.name+"-total-s")
		b.ReportMetric(r.peakRSS/n, s.name+"-peak-RSS-MiB")
	}
	b.ReportMetric(k.ready.Seconds()/c.ready.Seconds(), "kube/concord-ready")
	b.ReportMetric((k.ready+k.suite+k.stop).Seconds()/(c.ready+c.suite+c.stop).Seconds(), "kube/concord-total")
	b.ReportMetric(c.peakRSS/k.peakRSS, "concord/kube-RSS")
}

// envtestRun is what one suite run measured.
type envtestRun struct {
	ready, suite, stop time.Duration
	peakRSS            float64 // MiB, the API server's VmHWM
}

func (r *envtestRun) add(o envtestRun) {
	r.ready += o.ready
	r.suite += o.suite
	r.stop += o.stop
	r.peakRSS += o.peakRSS
}

// runEnvtestSuite is one kubebuilder-style suite on the API server of
// assets: envtest with the Gadgets CRD, a manager running gadgetReconciler,
// and 20 specs, each creating a Gadget, waiting until it is reconciled,
// changing its spec, waiting again, deleting it and waiting until its
// finalizer is done (no garbage collection: kube-apiserver alone has none).
// Waits poll every 10 ms, as Gomega's Eventually.
func runEnvtestSuite(b *testing.B, assets string) envtestRun {
	b.Helper()
	crdDir := b.TempDir()
	if err := os.WriteFile(filepath.Join(crdDir, "gadgets.yaml"), []byte(gadgetsCRD), 0o600); err != nil {
		b.Fatal(err)
	}
	var log syncBuffer
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{crdDir},
		ErrorIfCRDPathMissing: true,
		ControlPlane:          envtest.ControlPlane{APIServer: &envtest.APIServer{Out: &log, Err: &log}},
	}
	var run envtestRun
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		b.Fatalf("envtest Start: %v\n%s", err, log.tail(30))
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := c.Get(ctx, client.ObjectKey{Name: "default"}, &corev1.Namespace{}); err != nil {
		b.Fatal(err)
	}
	run.ready = time.Since(start)
	pid := apiserverPID(b, assets)

	start = time.Now()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		b.Fatal(err)
	}
	r := &gadgetReconciler{client: mgr.GetClient(), recorder: mgr.GetEventRecorder("gadget-controller")}
	gadget := &unstructured.Unstructured{}
	gadget.SetGroupVersionKind(gadgetGVK)
	// A controller's name is unique per process, and every run has one.
	if err := ctrl.NewControllerManagedBy(mgr).For(gadget).Owns(&corev1.ConfigMap{}).
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).Complete(r); err != nil {
		b.Fatal(err)
	}
	mgrCtx, stopManager := context.WithCancel(ctx)
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(mgrCtx) }()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	gadgets := dyn.Resource(gadgetGVK.GroupVersion().WithResource("gadgets")).Namespace("default")
	for spec := range 20 {
		name := fmt.Sprintf("spec-%d", spec)
		g := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "envtest.concord.dev/v1", "kind": "Gadget",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"data": map[string]any{"n": "1"}},
		}}
		if _, err := gadgets.Create(ctx, g, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		eventually(b, func() bool { return gadgetObserved(ctx, gadgets, c, name, 1, "1") })
		if _, err := gadgets.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"data":{"n":"2"}}}`), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		eventually(b, func() bool { return gadgetObserved(ctx, gadgets, c, name, 2, "2") })
		if err := gadgets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
		eventually(b, func() bool {
			_, err := gadgets.Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
	}
	stopManager()
	if err := <-mgrDone; err != nil {
		b.Fatalf("manager: %v", err)
	}
	run.suite = time.Since(start)
	run.peakRSS = peakRSSMiB(b, pid)

	start = time.Now()
	if err := env.Stop(); err != nil {
		b.Fatalf("envtest Stop: %v\n%s", err, log.tail(20))
	}
	run.stop = time.Since(start)
	return run
}

// gadgetObserved: Gadget name's status says generation was reconciled and
// its ConfigMap holds n.
func gadgetObserved(ctx context.Context, gadgets dynamic.ResourceInterface, c client.Client, name string, generation int64, n string) bool {
	g, err := gadgets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	if observed, _, _ := unstructured.NestedInt64(g.Object, "status", "observedGeneration"); observed != generation {
		return false
	}
	var cm corev1.ConfigMap
	return c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name + "-data"}, &cm) == nil && cm.Data["n"] == n
}

// eventually polls done every 10 ms for at most 30 s.
func eventually(b *testing.B, done func() bool) {
	b.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if done() {
			return
		}
	}
	b.Fatal("not within 30s")
}

// apiserverPID finds the process envtest started as <assets>/kube-apiserver.
func apiserverPID(b *testing.B, assets string) int {
	b.Helper()
	want := filepath.Join(assets, "kube-apiserver")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && string(bytes.SplitN(cmdline, []byte{0}, 2)[0]) == want {
			return pid
		}
	}
	b.Fatalf("no process %s", want)
	return 0
}

// peakRSSMiB is the process's VmHWM: the most resident memory it had.
func peakRSSMiB(b *testing.B, pid int) float64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kib / 1024
		}
	}
	b.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// kubeAPIServerBinary is kube-apiserver v1.37.2: $CONCORD_BENCH_KUBE_APISERVER,
// or built once from k8s.io/kubernetes's module (its staging modules
// replaced by their published versions) into the user cache directory.
func kubeAPIServerBinary(b *testing.B) string {
	b.Helper()
	if bin := os.Getenv("CONCORD_BENCH_KUBE_APISERVER"); bin != "" {
		return bin
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(cache, "concord-bench", "kube-apiserver-"+kubeVersion)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	b.Logf("building kube-apiserver %s into %s (once; several minutes)", kubeVersion, bin)
	out, err := exec.Command("go", "mod", "download", "-json", "k8s.io/kubernetes@"+kubeVersion).Output()
	if err != nil {
		b.Fatalf("go mod download k8s.io/kubernetes@%s: %v", kubeVersion, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		b.Fatal(err)
	}
	src := filepath.Join(b.TempDir(), "kubernetes")
	if out, err := exec.Command("cp", "-r", mod.Dir, src).CombinedOutput(); err != nil {
		b.Fatalf("copy the module: %v: %s", err, out)
	}
	if out, err := exec.Command("chmod", "-R", "u+w", src).CombinedOutput(); err != nil {
		b.Fatalf("chmod: %v: %s", err, out)
	}
	gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		b.Fatal(err)
	}
	// The module's zip has no staging/ (nested modules are left out).
	staging := regexp.MustCompile(`(?m)^(\s*)(k8s\.io/[a-z0-9-]+) => \./staging/src/k8s\.io/[a-z0-9-]+$`)
	gomod = staging.ReplaceAll(gomod, []byte("${1}${2} => ${2} v0"+strings.TrimPrefix(kubeVersion, "v1")))
	if err := os.WriteFile(filepath.Join(src, "go.mod"), gomod, 0o644); err != nil {
		b.Fatal(err)
	}
	// The version kube's own build stamps (hack/lib/version.sh).
	ldflags := fmt.Sprintf("-X k8s.io/component-base/version.gitVersion=%s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=%s -X k8s.io/component-base/version.gitTreeState=clean",
		kubeVersion, strings.Split(kubeVersion, ".")[1])
	build := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, "./cmd/kube-apiserver")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build kube-apiserver: %v\n%s", err, out)
	}
	return bin
}
