package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// The controller-runtime test's namespace, Lease and leader election
// timing: short, so that a failover takes seconds.
const (
	crNamespace     = "crtest"
	crLease         = "widget-controller"
	crLeaseDuration = 4 * time.Second
	crRenewDeadline = 3 * time.Second
	crRetryPeriod   = 500 * time.Millisecond
	// crFailoverSlack is allowed beyond the lease duration for a takeover:
	// the standby's next retry, through HAProxy while it still sends
	// some requests to the killed replica.
	crFailoverSlack = 4 * time.Second
	crReconcileWait = 15 * time.Second
	crStartWait     = 30 * time.Second
)

// The managers authenticate as a ServiceAccount with a token from
// TokenRequest; the test as the admin, with a static token of
// --token-auth-file.
const (
	crServiceAccount = "widget-controller"
	crManagerUser    = "system:serviceaccount:" + crNamespace + ":" + crServiceAccount
	crAdminToken     = "crtest-admin-token-9d2e"
)

// crPolicy is all the managers may do: read Widgets and write only their
// status, write (never delete) ConfigMaps, hold their Lease and record
// events.k8s.io Events, in crNamespace. A manager that wrote a Widget's
// spec or deleted a ConfigMap itself would be refused (403).
const crPolicy = `rules:
- users: ["%[1]s"]
  verbs: [get, list, watch]
  apiGroups: [e2e.concord.dev]
  resources: [widgets]
  namespaces: [%[2]s]
- users: ["%[1]s"]
  verbs: [update, patch]
  apiGroups: [e2e.concord.dev]
  resources: [widgets/status]
  namespaces: [%[2]s]
- users: ["%[1]s"]
  verbs: [get, list, watch, create, update, patch]
  apiGroups: [""]
  resources: [configmaps]
  namespaces: [%[2]s]
- users: ["%[1]s"]
  verbs: [get, create, update]
  apiGroups: [coordination.k8s.io]
  resources: [leases]
  namespaces: [%[2]s]
- users: ["%[1]s"]
  verbs: [create, update, patch]
  apiGroups: [events.k8s.io]
  resources: [events]
  namespaces: [%[2]s]
`

// crWidgetsCRD is the Widgets the manager reconciles (e2e/crmanager).
const crWidgetsCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.e2e.concord.dev}
spec:
  group: e2e.concord.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
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
              reconciles: {type: integer, format: int64}
`

var crWidgetsGVR = schema.GroupVersionResource{Group: "e2e.concord.dev", Version: "v1", Resource: "widgets"}

var (
	crManagerBuildOnce sync.Once
	crManagerBinPath   string
	crManagerBuildErr  error
)

// crManagerBinary builds ./e2e/crmanager once per test binary, next to
// concordBin.
func crManagerBinary(t *testing.T) string {
	t.Helper()
	crManagerBuildOnce.Do(func() {
		crManagerBinPath = filepath.Join(filepath.Dir(concordBin), "crmanager")
		out, err := exec.Command("go", "build", "-o", crManagerBinPath, "github.com/concord-dev/concord/e2e/crmanager").CombinedOutput()
		if err != nil {
			crManagerBuildErr = fmt.Errorf("go build of e2e/crmanager failed: %v\n%s", err, out)
		}
	})
	if crManagerBuildErr != nil {
		t.Fatal(crManagerBuildErr)
	}
	return crManagerBinPath
}

// crManager is one running e2e/crmanager process.
type crManager struct {
	identity string
	probeURL string
	p        *proc
}

// startCRManager starts a manager against server and waits until its
// /readyz answers.
func startCRManager(t *testing.T, identity, server, tokenFile string) *crManager {
	t.Helper()
	port := loopbackPorts(t, 1)[0]
	m := &crManager{identity: identity, probeURL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	m.p = startProc(t, identity, t.TempDir(), crManagerBinary(t),
		"--server", server, "--token-file", tokenFile,
		"--namespace", crNamespace, "--identity", identity, "--lease-name", crLease,
		"--lease-duration", crLeaseDuration.String(), "--renew-deadline", crRenewDeadline.String(), "--retry-period", crRetryPeriod.String(),
		"--health-probe-address", fmt.Sprintf("127.0.0.1:%d", port))
	waitFor(t, identity+" /readyz", crStartWait, func() string {
		if !m.p.running() {
			t.Fatalf("%s exited; log:\n%s", identity, m.p.log())
		}
		return wantOK(t.Context(), m.probeURL+"/readyz")()
	})
	return m
}

// reconciles counts the manager's reconciles so far (its "reconciled"
// log lines).
func (m *crManager) reconciles() int {
	n := 0
	for _, msg := range m.p.logMessages() {
		if msg == "reconciled" {
			n++
		}
	}
	return n
}

// crWant is what a Widget must come to, once reconciled.
type crWant struct {
	data       map[string]string
	generation int64
	// events are the notes of its Reconciled Events, sorted.
	events []string
}

// crSeen is what the test reads of a Widget and its ConfigMap. Once
// reconciled, each generation exactly once: observedGeneration and
// reconciles equal the generation, and the ConfigMap holds spec.data.
type crSeen struct {
	Generation, ObservedGeneration, Reconciles int64
	Data, ConfigMapData                        map[string]string
	ConfigMapName                              string
	OwnerReferences                            []metav1.OwnerReference
}

type crClients struct {
	widgets dynamic.ResourceInterface
	kube    *kubernetes.Clientset
}

// seen reads the Widget and the ConfigMap its status names.
func (c crClients) seen(ctx context.Context, name string) (crSeen, types.UID, error) {
	w, err := c.widgets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return crSeen{}, "", err
	}
	s := crSeen{Generation: w.GetGeneration()}
	s.ObservedGeneration, _, _ = unstructured.NestedInt64(w.Object, "status", "observedGeneration")
	s.Reconciles, _, _ = unstructured.NestedInt64(w.Object, "status", "reconciles")
	s.ConfigMapName, _, _ = unstructured.NestedString(w.Object, "status", "configMapName")
	s.Data, _, _ = unstructured.NestedStringMap(w.Object, "spec", "data")
	if s.ConfigMapName != "" {
		cm, err := c.kube.CoreV1().ConfigMaps(crNamespace).Get(ctx, s.ConfigMapName, metav1.GetOptions{})
		if err != nil {
			return s, w.GetUID(), err
		}
		s.ConfigMapData, s.OwnerReferences = cm.Data, cm.OwnerReferences
	}
	return s, w.GetUID(), nil
}

// waitReconciled waits until the Widget and its ConfigMap are as want
// says, and returns how long that took.
func (c crClients) waitReconciled(t *testing.T, name string, want crWant) time.Duration {
	t.Helper()
	return waitFor(t, fmt.Sprintf("widget %s reconciled at generation %d", name, want.generation), crReconcileWait, func() string {
		got, uid, err := c.seen(t.Context(), name)
		if err != nil {
			return err.Error()
		}
		w := crSeen{
			Generation: want.generation, ObservedGeneration: want.generation, Reconciles: want.generation,
			Data: want.data, ConfigMapData: want.data, ConfigMapName: name + "-data",
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "e2e.concord.dev/v1", Kind: "Widget", Name: name, UID: uid,
				Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true),
			}},
		}
		if diff := cmp.Diff(w, got); diff != "" {
			return "(-want +got):\n" + diff
		}
		return ""
	})
}

// waitEvents waits until the Reconciled Events of every Widget are exactly
// want's: one per generation, by the instance that reconciled it.
func (c crClients) waitEvents(t *testing.T, want map[string]crWant) {
	t.Helper()
	wantNotes := map[string][]string{}
	for name, w := range want {
		wantNotes[name] = w.events
	}
	waitFor(t, "the Widgets' Reconciled Events", crReconcileWait, func() string {
		list, err := c.kube.EventsV1().Events(crNamespace).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		got := map[string][]string{}
		for _, e := range list.Items {
			if e.Regarding.Kind != "Widget" {
				continue
			}
			if e.Reason != "Reconciled" || e.Action != "WriteConfigMap" || e.Type != corev1.EventTypeNormal ||
				e.ReportingController != "widget-controller" || e.Related == nil || e.Related.Name != e.Regarding.Name+"-data" {
				return fmt.Sprintf("an Event on widget %s is not the controller's: %+v", e.Regarding.Name, e)
			}
			got[e.Regarding.Name] = append(got[e.Regarding.Name], e.Note)
		}
		for name := range got {
			slices.Sort(got[name])
		}
		if diff := cmp.Diff(wantNotes, got); diff != "" {
			return "notes (-want +got):\n" + diff
		}
		return ""
	})
}

// ownedConfigMaps is every ConfigMap of the namespace that a Widget owns,
// by name: the controller's, and no duplicates.
func (c crClients) ownedConfigMaps(t *testing.T) map[string]map[string]string {
	t.Helper()
	list, err := c.kube.CoreV1().ConfigMaps(crNamespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list ConfigMaps: %v", err)
	}
	owned := map[string]map[string]string{}
	for _, cm := range list.Items {
		for _, ref := range cm.OwnerReferences {
			if ref.Kind == "Widget" {
				owned[cm.Name] = cm.Data
			}
		}
	}
	return owned
}

func crWidget(name string, data map[string]string) *unstructured.Unstructured {
	d := map[string]any{}
	for k, v := range data {
		d[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "e2e.concord.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"data": d},
	}}
}

// TestControllerRuntime runs two controller-runtime managers (e2e/crmanager)
// of a Widget controller against three replicas behind HAProxy, as a
// ServiceAccount with a token from TokenRequest and a policy that grants
// it only what they use. Manager
// A talks to replica concord1 directly and is started first, so it leads;
// manager B, the standby, talks through HAProxy, which spreads its watches
// over all three replicas. A reconciles Widgets (status through /status,
// an owned ConfigMap, an Event); then A and concord1 are SIGKILLed, so B
// also loses the watches it had on concord1. B must take the Lease over
// within the lease duration and some slack, and reconcile what changed
// meanwhile and after; each generation of each Widget is handled exactly
// once (status.reconciles = generation), by the instance that led then.
// Last, a Widget is deleted and Concord's garbage collector deletes its
// ConfigMap.
//
// It does not call t.Parallel, as the fault tests do not: the failover
// bound holds on a 2-core machine only with no other test running.
func TestControllerRuntime(t *testing.T) {
	crManagerBinary(t) // built before anything starts
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	policy := filepath.Join(dir, "policy.yaml")
	writeFile(t, tokens, crAdminToken+",e2e-admin,0,system:masters\n")
	writeFile(t, policy, fmt.Sprintf(crPolicy, crManagerUser, crNamespace))

	etcd := startEtcdCluster(t)
	// One signing key, so that a token from any replica is good on all;
	// Concord's own controllers (the garbage collector) on Leases as short
	// as the managers', so that losing concord1 does not stall them long.
	replicas := startFaultReplicas(t, etcd, 3,
		"--anonymous-auth=false", "--authorization-mode", "Policy",
		"--token-auth-file", tokens, "--authorization-policy-file", policy,
		"--service-account-signing-key-file", writeSigningKey(t, dir),
		"--leader-elect-lease-duration", crLeaseDuration.String(), "--leader-elect-renew-deadline", crRenewDeadline.String(),
		"--leader-elect-retry-period", crRetryPeriod.String())
	lb := startHAProxy(t, replicas)

	admin := &rest.Config{Host: lb.url, BearerToken: crAdminToken, QPS: -1}
	kube, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	c := crClients{widgets: dyn.Resource(crWidgetsGVR).Namespace(crNamespace), kube: kube}
	ctx := t.Context()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: crNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", crNamespace, err)
	}
	installCRWidgetsCRD(t, admin, replicas)

	managerToken := filepath.Join(dir, "manager.token")
	writeFile(t, managerToken, serviceAccountToken(t, kube, admin))
	a := startCRManager(t, "manager-a", replicas[0].url, managerToken)
	waitFor(t, "manager-a leads", crStartWait, func() string {
		if !contains(a.p.logMessages(), "became leader") {
			return "no \"became leader\" in its log"
		}
		return ""
	})
	b := startCRManager(t, "manager-b", lb.url, managerToken)
	checkLease(t, kube, "manager-a", 0)

	want := map[string]crWant{
		"w1": {data: map[string]string{"color": "blue", "size": "s"}, generation: 1, events: []string{"generation 1 by manager-a"}},
		"w2": {data: map[string]string{"color": "red"}, generation: 1, events: []string{"generation 1 by manager-a"}},
		"w3": {data: map[string]string{"color": "yellow"}, generation: 1, events: []string{"generation 1 by manager-a"}},
	}
	for _, name := range []string{"w1", "w2", "w3"} {
		if _, err := c.widgets.Create(ctx, crWidget(name, want[name].data), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create widget %s: %v", name, err)
		}
	}
	for _, name := range []string{"w1", "w2", "w3"} {
		took := c.waitReconciled(t, name, want[name])
		t.Logf("%s created and reconciled by manager-a in %s", name, took.Round(time.Millisecond))
	}
	// A key removed from spec.data is removed from the ConfigMap too.
	patchWidgetData(t, c, "w1", `{"color":"green","size":null,"shape":"round"}`)
	want["w1"] = crWant{data: map[string]string{"color": "green", "shape": "round"}, generation: 2,
		events: []string{"generation 1 by manager-a", "generation 2 by manager-a"}}
	c.waitReconciled(t, "w1", want["w1"])
	c.waitEvents(t, want)
	if n := b.reconciles(); n != 0 {
		t.Errorf("manager-b reconciled %d times while it stood by", n)
	}

	// The leader and its replica die; nothing runs the controller until B
	// takes the Lease over.
	killed := time.Now()
	a.p.kill(t)
	replicas[0].kill(t)
	// Changed while no one leads: B must see it when it takes over.
	lb.waitServer(t, replicas[0].name, "DOWN")
	patchWidgetData(t, c, "w3", `{"color":"black"}`)
	want["w3"] = crWant{data: map[string]string{"color": "black"}, generation: 2,
		events: []string{"generation 1 by manager-a", "generation 2 by manager-b"}}
	// The bound runs from the kill, not from the start of the wait.
	failoverBound := crLeaseDuration + crFailoverSlack
	waitFor(t, "manager-b holds the Lease", failoverBound-time.Since(killed), func() string {
		l, err := kube.CoordinationV1().Leases(crNamespace).Get(ctx, crLease, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if holder := ptrValue(l.Spec.HolderIdentity); holder != "manager-b" {
			return "holder " + holder
		}
		return ""
	})
	t.Logf("manager-b holds the Lease %s after the kill (lease duration %s, bound %s)", time.Since(killed).Round(time.Millisecond), crLeaseDuration, failoverBound)
	waitFor(t, "manager-b logs that it leads", crReconcileWait, func() string {
		if !contains(b.p.logMessages(), "became leader") {
			return "no \"became leader\" in its log"
		}
		return ""
	})
	c.waitReconciled(t, "w3", want["w3"])

	patchWidgetData(t, c, "w2", `{"size":"l"}`)
	want["w2"] = crWant{data: map[string]string{"color": "red", "size": "l"}, generation: 2,
		events: []string{"generation 1 by manager-a", "generation 2 by manager-b"}}
	want["w4"] = crWant{data: map[string]string{"color": "white"}, generation: 1, events: []string{"generation 1 by manager-b"}}
	if _, err := c.widgets.Create(ctx, crWidget("w4", want["w4"].data), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create widget w4: %v", err)
	}
	for _, name := range []string{"w1", "w2", "w3", "w4"} {
		c.waitReconciled(t, name, want[name])
	}
	c.waitEvents(t, want)
	checkLease(t, kube, "manager-b", 1)
	wantOwned := map[string]map[string]string{}
	for name, w := range want {
		wantOwned[name+"-data"] = w.data
	}
	if diff := cmp.Diff(wantOwned, c.ownedConfigMaps(t)); diff != "" {
		t.Errorf("ConfigMaps owned by Widgets (-want +got):\n%s", diff)
	}

	// Concord's garbage collector deletes the ConfigMap of a deleted
	// Widget; the controller never deletes one (its policy forbids it).
	if err := c.widgets.Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete widget w1: %v", err)
	}
	delete(wantOwned, "w1-data")
	took := waitFor(t, "w1-data collected", crReconcileWait, func() string {
		if diff := cmp.Diff(wantOwned, c.ownedConfigMaps(t)); diff != "" {
			return "ConfigMaps owned by Widgets (-want +got):\n" + diff
		}
		return ""
	})
	t.Logf("w1 deleted; w1-data collected %s later", took.Round(time.Millisecond))
}

// writeSigningKey writes a new ECDSA P-256 key for ServiceAccount tokens
// into dir and returns its path.
func writeSigningKey(t *testing.T, dir string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sa.key")
	writeFile(t, path, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})))
	return path
}

// serviceAccountToken creates the managers' ServiceAccount, asks
// TokenRequest for a token of it, and checks that Concord takes the token
// for the ServiceAccount (SelfSubjectReview).
func serviceAccountToken(t *testing.T, kube *kubernetes.Clientset, admin *rest.Config) string {
	t.Helper()
	sas := kube.CoreV1().ServiceAccounts(crNamespace)
	if _, err := sas.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: crServiceAccount}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceAccount %s: %v", crServiceAccount, err)
	}
	tr, err := sas.CreateToken(t.Context(), crServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(time.Hour / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s: %v", crServiceAccount, err)
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tr.Status.Token
	asSA, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := asSA.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview with the ServiceAccount's token: %v", err)
	}
	if got := review.Status.UserInfo.Username; got != crManagerUser {
		t.Fatalf("SelfSubjectReview with the ServiceAccount's token: user %q; want %q", got, crManagerUser)
	}
	return tr.Status.Token
}

// installCRWidgetsCRD creates the Widgets CRD and waits until every
// replica serves it.
func installCRWidgetsCRD(t *testing.T, cfg *rest.Config, replicas []*faultReplica) {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict([]byte(crWidgetsCRD), &crd); err != nil {
		t.Fatal(err)
	}
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(t.Context(), &crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the CRD: %v", err)
	}
	for _, r := range replicas {
		rc := rest.CopyConfig(cfg)
		rc.Host = r.url
		dyn, err := dynamic.NewForConfig(rc)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, r.name+" serves widgets", crStartWait, func() string {
			if _, err := dyn.Resource(crWidgetsGVR).Namespace(crNamespace).List(t.Context(), metav1.ListOptions{}); err != nil {
				return err.Error()
			}
			return ""
		})
	}
}

// patchWidgetData merge-patches spec.data of a Widget; it retries while
// HAProxy may still send the request to a replica that died.
func patchWidgetData(t *testing.T, c crClients, name, data string) {
	t.Helper()
	patch := []byte(`{"spec":{"data":` + data + `}}`)
	waitFor(t, "patch widget "+name, crReconcileWait, func() string {
		if _, err := c.widgets.Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err.Error()
		}
		return ""
	})
}

// checkLease fails unless the managers' Lease is held by holder after
// transitions changes of holder.
func checkLease(t *testing.T, kube *kubernetes.Clientset, holder string, transitions int32) {
	t.Helper()
	l, err := kube.CoordinationV1().Leases(crNamespace).Get(t.Context(), crLease, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Lease %s: %v", crLease, err)
	}
	got := fmt.Sprintf("holder %s, transitions %d, duration %ds", ptrValue(l.Spec.HolderIdentity), ptrValue(l.Spec.LeaseTransitions), ptrValue(l.Spec.LeaseDurationSeconds))
	if want := fmt.Sprintf("holder %s, transitions %d, duration %ds", holder, transitions, int32(crLeaseDuration/time.Second)); got != want {
		t.Errorf("Lease %s/%s: %s; want %s", crNamespace, crLease, got, want)
	}
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
