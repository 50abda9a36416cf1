package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// envtestAssets is a KUBEBUILDER_ASSETS directory laid out by `concord
// envtest-assets` (setup-envtest's layout): kube-apiserver and etcd are the
// built binary, kubectl the one on PATH.
func envtestAssets(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "assets")
	out, err := exec.Command(concordBin, "envtest-assets", dir).CombinedOutput()
	if err != nil || string(out) != "export KUBEBUILDER_ASSETS="+dir+"\n" {
		t.Fatalf("concord envtest-assets %s: %v: %q", dir, err, out)
	}
	return dir
}

// gadgetsCRD is the suite's CRD directory, as a kubebuilder project's
// config/crd/bases: Gadgets with a status subresource.
const gadgetsCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.envtest.concord.dev
spec:
  group: envtest.concord.dev
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              data: {type: object, additionalProperties: {type: string}}
          status:
            type: object
            properties:
              observedGeneration: {type: integer, format: int64}
              configMapName: {type: string}
`

const gadgetFinalizer = "envtest.concord.dev/cleanup"

var gadgetGVK = schema.GroupVersionKind{Group: "envtest.concord.dev", Version: "v1", Kind: "Gadget"}

// gadgetReconciler is a kubebuilder-style reconciler: a finalizer, an
// owned ConfigMap holding spec.data, status through /status, and an Event
// per generation. On deletion it records that it cleaned up and removes
// its finalizer; the ConfigMap is left to the garbage collector.
type gadgetReconciler struct {
	client   client.Client
	recorder recorder.EventRecorder

	mu       sync.Mutex
	cleanups []string
}

func (r *gadgetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	g := &unstructured.Unstructured{}
	g.SetGroupVersionKind(gadgetGVK)
	if err := r.client.Get(ctx, req.NamespacedName, g); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if g.GetDeletionTimestamp() != nil {
		if controllerutil.RemoveFinalizer(g, gadgetFinalizer) {
			r.mu.Lock()
			r.cleanups = append(r.cleanups, g.GetName())
			r.mu.Unlock()
			return ctrl.Result{}, r.client.Update(ctx, g)
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(g, gadgetFinalizer) {
		if err := r.client.Update(ctx, g); err != nil {
			return ctrl.Result{}, err
		}
	}
	data, _, _ := unstructured.NestedStringMap(g.Object, "spec", "data")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: g.GetName() + "-data", Namespace: g.GetNamespace()}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.client, cm, func() error {
		cm.Data = data
		return controllerutil.SetControllerReference(g, cm, r.client.Scheme())
	}); err != nil {
		return ctrl.Result{}, err
	}
	if observed, _, _ := unstructured.NestedInt64(g.Object, "status", "observedGeneration"); observed == g.GetGeneration() {
		return ctrl.Result{}, nil
	}
	_ = unstructured.SetNestedField(g.Object, g.GetGeneration(), "status", "observedGeneration")
	_ = unstructured.SetNestedField(g.Object, cm.Name, "status", "configMapName")
	if err := r.client.Status().Update(ctx, g); err != nil {
		return ctrl.Result{}, err
	}
	r.recorder.Eventf(g, cm, corev1.EventTypeNormal, "Reconciled", "WriteConfigMap", "generation %d", g.GetGeneration())
	return ctrl.Result{}, nil
}

// TestEnvtest runs controller-runtime's envtest with Concord where it
// expects kube-apiserver, as a kubebuilder suite does: envtest writes the
// certificates, starts etcd and "kube-apiserver" with its own flags, polls
// /healthz, waits for the default namespace and installs the CRD
// directory; a manager (cache, leader election, recorder) reconciles
// Gadgets; the test creates, updates and deletes them and checks the
// reconciler's status, owned ConfigMap, Events, finalizer and the garbage
// collection of the ConfigMap; Stop sends SIGTERM and must end cleanly.
func TestEnvtest(t *testing.T) {
	assets := envtestAssets(t)
	crdDir := t.TempDir()
	writeFile(t, filepath.Join(crdDir, "gadgets.yaml"), gadgetsCRD)

	var apiserverLog syncBuffer
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{crdDir},
		ErrorIfCRDPathMissing: true,
		// As a kubebuilder project with a webhook: envtest points it at the
		// manager's webhook server (its local port and certificates), and
		// Concord calls it.
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{gadgetWebhook()},
		},
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{Out: &apiserverLog, Err: &apiserverLog},
		},
	}
	// A kube-only flag a suite may add: accepted, and said to be ignored.
	env.ControlPlane.GetAPIServer().Configure().Append("enable-admission-plugins", "NamespaceLifecycle,ResourceQuota")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest Start with Concord as kube-apiserver: %v\n%s", err, apiserverLog.tail(40))
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = env.Stop()
		}
	})
	for _, flag := range []string{"--allow-privileged", "--service-cluster-ip-range", "--disable-admission-plugins", "--enable-admission-plugins"} {
		if !strings.Contains(apiserverLog.String(), `"msg":"kube-apiserver flag ignored: it has no meaning in Concord","flag":"`+flag+`"`) {
			t.Errorf("no log line saying %s is ignored", flag)
		}
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var hook admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Get(context.Background(), client.ObjectKey{Name: "gadgets.envtest.concord.dev"}, &hook); err != nil {
		t.Fatalf("the webhook configuration envtest installed: %v", err)
	}
	// envtest's URL: https://host:port/ followed by the service's path.
	wantURL := fmt.Sprintf("https://%s//validate-gadget", net.JoinHostPort(env.WebhookInstallOptions.LocalServingHost, strconv.Itoa(env.WebhookInstallOptions.LocalServingPort)))
	if cc := hook.Webhooks[0].ClientConfig; cc.URL == nil || *cc.URL != wantURL || cc.Service != nil || len(cc.CABundle) == 0 ||
		*hook.Webhooks[0].FailurePolicy != admissionregistrationv1.Fail || *hook.Webhooks[0].TimeoutSeconds != 10 {
		t.Errorf("stored webhook: URL %v, service %v, %d bytes of CA, failurePolicy %v, timeoutSeconds %v; want envtest's URL %s and CA bundle, kube's defaults Fail and 10",
			ptrString(cc.URL), cc.Service, len(cc.CABundle), ptrString(hook.Webhooks[0].FailurePolicy), ptrString(hook.Webhooks[0].TimeoutSeconds), wantURL)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		LeaderElection:          true,
		LeaderElectionID:        "gadgets.envtest.concord.dev",
		LeaderElectionNamespace: "default",
		WebhookServer: crwebhook.NewServer(crwebhook.Options{
			Host: env.WebhookInstallOptions.LocalServingHost, Port: env.WebhookInstallOptions.LocalServingPort,
			CertDir: env.WebhookInstallOptions.LocalServingCertDir,
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &gadgetReconciler{client: mgr.GetClient(), recorder: mgr.GetEventRecorder("gadget-controller")}
	gadget := &unstructured.Unstructured{}
	gadget.SetGroupVersionKind(gadgetGVK)
	if err := ctrl.NewControllerManagedBy(mgr).For(gadget).Owns(&corev1.ConfigMap{}).Complete(r); err != nil {
		t.Fatal(err)
	}
	mgr.GetWebhookServer().Register("/validate-gadget", &cradmission.Webhook{Handler: cradmission.HandlerFunc(validateGadget)})
	mgrCtx, cancelManager := context.WithCancel(ctx)
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(mgrCtx) }()
	stopManager := sync.OnceFunc(func() {
		cancelManager()
		select {
		case err := <-mgrDone:
			if err != nil {
				t.Errorf("manager: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the manager did not stop within 30s")
		}
	})
	defer stopManager()

	// The webhook server serves before the first Gadget is written.
	for deadline := time.Now().Add(30 * time.Second); mgr.GetWebhookServer().StartedChecker()(nil) != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the manager's webhook server did not start within 30s")
		}
	}

	const ns = "envtest"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	gadgets := dyn.Resource(gadgetGVK.GroupVersion().WithResource("gadgets")).Namespace(ns)
	for _, name := range []string{"a", "b"} {
		g := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "envtest.concord.dev/v1", "kind": "Gadget",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"data": map[string]any{"name": name}},
		}}
		if _, err := gadgets.Create(ctx, g, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create Gadget %s: %v", name, err)
		}
	}
	// The suite's validating webhook refuses what it should, through
	// Concord, with kube's message; nothing is stored.
	forbidden := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "envtest.concord.dev/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "forbidden"},
		"spec":     map[string]any{"data": map[string]any{"name": "forbidden"}},
	}}
	_, err = gadgets.Create(ctx, forbidden, metav1.CreateOptions{})
	const denied = `admission webhook "vgadget.envtest.concord.dev" denied the request: a gadget may not be named forbidden`
	if !apierrors.IsForbidden(err) || err.Error() != denied {
		t.Fatalf("create of a forbidden Gadget: %v; want 403 %q", err, denied)
	}
	if _, err := gadgets.Get(ctx, "forbidden", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused Gadget: %v; want NotFound", err)
	}
	waitGadget(t, ctx, c, dyn, ns, "a", 1, map[string]string{"name": "a"})
	waitGadget(t, ctx, c, dyn, ns, "b", 1, map[string]string{"name": "b"})

	// An update of the spec: a new generation, reconciled into the ConfigMap.
	if _, err := gadgets.Patch(ctx, "a", types.MergePatchType, []byte(`{"spec":{"data":{"name":"a","color":"blue"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGadget(t, ctx, c, dyn, ns, "a", 2, map[string]string{"name": "a", "color": "blue"})

	// One Reconciled Event per generation, regarding the Gadget.
	waitUntil(t, ctx, "the Reconciled Events", func() (bool, string) {
		var events eventsv1.EventList
		if err := c.List(ctx, &events, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var got []string
		for _, e := range events.Items {
			if e.Reason == "Reconciled" && e.Regarding.Kind == "Gadget" {
				got = append(got, e.Regarding.Name+": "+e.Note)
			}
		}
		slices.Sort(got)
		return slices.Equal(got, []string{"a: generation 1", "a: generation 2", "b: generation 1"}), fmt.Sprint(got)
	})

	// Delete: the finalizer holds the Gadget until the reconciler removes
	// it; then the garbage collector deletes the owned ConfigMap.
	if err := gadgets.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "Gadget a and its ConfigMap gone", func() (bool, string) {
		_, gErr := gadgets.Get(ctx, "a", metav1.GetOptions{})
		cmErr := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a-data"}, &corev1.ConfigMap{})
		return apierrors.IsNotFound(gErr) && apierrors.IsNotFound(cmErr), fmt.Sprintf("gadget: %v, configmap: %v", gErr, cmErr)
	})
	r.mu.Lock()
	if fmt.Sprint(r.cleanups) != "[a]" {
		t.Errorf("the reconciler cleaned up %v; want [a], once", r.cleanups)
	}
	r.mu.Unlock()
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "b-data"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("Gadget b's ConfigMap: %v; want it kept", err)
	}

	// A user of envtest's AddUser (a client certificate of its CA) is
	// authorized by RBAC: nothing until a binding grants it.
	dev, err := env.AddUser(envtest.User{Name: "dev", Groups: []string{"devs"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	devClient, err := client.New(dev.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var cms corev1.ConfigMapList
	if err := devClient.List(ctx, &cms, client.InNamespace(ns)); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), `User "dev" cannot list resource "configmaps" in API group "" in the namespace "envtest"`) {
		t.Errorf("dev lists ConfigMaps before any grant: %v; want 403", err)
	}
	if err := c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "devs-view", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "devs"}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := devClient.List(ctx, &cms, client.InNamespace(ns)); err != nil || len(cms.Items) != 1 || cms.Items[0].Name != "b-data" {
		t.Errorf("dev lists ConfigMaps after the grant: %v, %d items; want b-data", err, len(cms.Items))
	}

	stopManager()
	stopped = true
	if err := env.Stop(); err != nil {
		t.Errorf("envtest Stop (SIGTERM): %v\n%s", err, apiserverLog.tail(20))
	}
	if !strings.Contains(apiserverLog.String(), `"msg":"stopped"`) {
		t.Errorf("Concord did not log a clean stop:\n%s", apiserverLog.tail(20))
	}
}

// ptrString is what p points at, or nil.
func ptrString[T any](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// validateGadget is the suite's validating webhook: no Gadget may be named
// "forbidden" in its spec.
func validateGadget(_ context.Context, req cradmission.Request) cradmission.Response {
	var g unstructured.Unstructured
	if err := g.UnmarshalJSON(req.Object.Raw); err != nil {
		return cradmission.Errored(http.StatusBadRequest, err)
	}
	if name, _, _ := unstructured.NestedString(g.Object, "spec", "data", "name"); name == "forbidden" {
		return cradmission.Denied("a gadget may not be named forbidden")
	}
	return cradmission.Allowed("")
}

// gadgetWebhook is a kubebuilder-style validating webhook of Gadgets.
func gadgetWebhook() *admissionregistrationv1.ValidatingWebhookConfiguration {
	none := admissionregistrationv1.SideEffectClassNone
	path := "/validate-gadget"
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets.envtest.concord.dev"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "vgadget.envtest.concord.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "system", Name: "webhook-service", Path: &path}},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"envtest.concord.dev"}, APIVersions: []string{"v1"}, Resources: []string{"gadgets"}}}},
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// TestEnvtestUnknownFlag: a kube-apiserver flag Concord does not know is
// refused at start, with a message naming it — never silently ignored.
func TestEnvtestUnknownFlag(t *testing.T) {
	var apiserverLog syncBuffer
	env := &envtest.Environment{
		BinaryAssetsDirectory: envtestAssets(t),
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{Out: &apiserverLog, Err: &apiserverLog},
		},
	}
	env.ControlPlane.GetAPIServer().Configure().Append("feature-gates", "SomeGate=true")
	_, err := env.Start()
	if err == nil {
		_ = env.Stop()
		t.Fatal("envtest started Concord with --feature-gates; want the start refused")
	}
	_ = env.Stop() // etcd
	if !strings.Contains(apiserverLog.String(), "flag provided but not defined: -feature-gates") {
		t.Errorf("Concord's output does not name the unknown flag:\n%s", apiserverLog.tail(10))
	}
}

// waitGadget waits until Gadget name's status says generation was
// reconciled and its ConfigMap, owned by it as controller, holds data.
func waitGadget(t *testing.T, ctx context.Context, c client.Client, dyn dynamic.Interface, ns, name string, generation int64, data map[string]string) {
	t.Helper()
	waitUntil(t, ctx, "Gadget "+name+" reconciled", func() (bool, string) {
		g, err := dyn.Resource(gadgetGVK.GroupVersion().WithResource("gadgets")).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		observed, _, _ := unstructured.NestedInt64(g.Object, "status", "observedGeneration")
		cmName, _, _ := unstructured.NestedString(g.Object, "status", "configMapName")
		if g.GetGeneration() != generation || observed != generation || cmName != name+"-data" {
			return false, fmt.Sprintf("generation %d, status %v", g.GetGeneration(), g.Object["status"])
		}
		if !controllerutil.ContainsFinalizer(g, gadgetFinalizer) {
			return false, fmt.Sprintf("finalizers %v", g.GetFinalizers())
		}
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: cmName}, &cm); err != nil {
			return false, err.Error()
		}
		owner := metav1.GetControllerOf(&cm)
		if owner == nil || owner.UID != g.GetUID() || owner.Kind != "Gadget" || fmt.Sprint(cm.Data) != fmt.Sprint(data) {
			return false, fmt.Sprintf("ConfigMap data %v, controller %v", cm.Data, owner)
		}
		return true, ""
	})
}

// waitUntil polls done every 50ms until it holds or a minute (or ctx) is
// over; then the test fails with done's last word.
func waitUntil(t *testing.T, ctx context.Context, what string, done func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	last := ""
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ok, state := done()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within a minute; last: %s", what, last)
}

// syncBuffer is the control plane's output, written by envtest's process
// goroutines and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail is the last n lines of the output.
func (b *syncBuffer) tail(n int) string {
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
