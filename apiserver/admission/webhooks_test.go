package admission

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/utils/ptr"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
)

// webhookServer is an HTTPS admission webhook on 127.0.0.1 with its own
// CA: each path answers as its name says, and every AdmissionReview it
// received is kept.
type webhookServer struct {
	*httptest.Server
	caPEM []byte
	mu    sync.Mutex
	got   map[string][]admissionv1.AdmissionRequest
}

func startWebhookServer(t *testing.T) *webhookServer {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhook test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	s := &webhookServer{
		caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		got:   map[string][]admissionv1.AdmissionRequest{},
	}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (s *webhookServer) serve(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.got[r.URL.Path] = append(s.got[r.URL.Path], *review.Request)
	s.mu.Unlock()
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	switch r.URL.Path {
	case "/deny":
		resp.Allowed = false
		resp.Result = &metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: "no configmaps here"}
	case "/deny-200":
		resp.Allowed = false
		resp.Result = &metav1.Status{Code: http.StatusOK, Message: "a code below 400"}
	case "/deny-bare":
		resp.Allowed = false
	case "/patch":
		resp.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
		resp.Patch = []byte(`[{"op":"add","path":"/metadata/labels","value":{"mutated":"yes"}}]`)
	case "/slow":
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
	}
	review.Response = resp
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// calls are the requests path received so far.
func (s *webhookServer) calls(path string) []admissionv1.AdmissionRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]admissionv1.AdmissionRequest(nil), s.got[path]...)
}

// hook is one webhook of a test's configuration.
type hook struct {
	name, path  string
	url         string // instead of the server's path
	service     *admissionregistrationv1.ServiceReference
	ignore      bool // failurePolicy Ignore, else Fail
	timeout     int32
	resources   []string // configmaps when empty
	groups      []string // the core group when empty
	ns, obj     *metav1.LabelSelector
	conditions  []admissionregistrationv1.MatchCondition
	sideEffects admissionregistrationv1.SideEffectClass
	reinvoke    bool // reinvocationPolicy IfNeeded (mutating)
}

func (h hook) clientConfig(s *webhookServer) admissionregistrationv1.WebhookClientConfig {
	if h.service != nil {
		return admissionregistrationv1.WebhookClientConfig{Service: h.service, CABundle: s.caPEM}
	}
	url := h.url
	if url == "" {
		url = s.URL + h.path
	}
	return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: s.caPEM}
}

func (h hook) rules() []admissionregistrationv1.RuleWithOperations {
	resources, groups := h.resources, h.groups
	if resources == nil {
		resources = []string{"configmaps"}
	}
	if groups == nil {
		groups = []string{""}
	}
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
		Rule:       admissionregistrationv1.Rule{APIGroups: groups, APIVersions: []string{"*"}, Resources: resources},
	}}
}

func (h hook) policy() *admissionregistrationv1.FailurePolicyType {
	if h.ignore {
		return ptr.To(admissionregistrationv1.Ignore)
	}
	return ptr.To(admissionregistrationv1.Fail)
}

func (h hook) effects() *admissionregistrationv1.SideEffectClass {
	if h.sideEffects == "" {
		return ptr.To(admissionregistrationv1.SideEffectClassNone)
	}
	return ptr.To(h.sideEffects)
}

func (h hook) reinvocation() *admissionregistrationv1.ReinvocationPolicyType {
	if h.reinvoke {
		return ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy)
	}
	return ptr.To(admissionregistrationv1.NeverReinvocationPolicy)
}

func (h hook) timeoutSeconds() *int32 {
	if h.timeout == 0 {
		return nil
	}
	return ptr.To(h.timeout)
}

// env is a real etcd, the registry's stores and the webhooks admission
// over them, running.
type env struct {
	ctx                                 context.Context
	w                                   *Webhooks
	server                              *webhookServer
	validating, mutating, namespaces    *registry.Store
	configmaps, leases, validatingHooks *registry.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := etcdtest.Start(t)
	stores := registry.NewStores(etcdstore.New(e.Client, "/registry"), registry.DefaultWatchConfig())
	catalog := registry.NewCatalog(stores)
	lookup := func(group, version, resource string) *registry.Store {
		s, ok := catalog.Lookup(group, version, resource)
		if !ok {
			t.Fatalf("no store of %s/%s %s", group, version, resource)
		}
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	if err := registry.EnsureSystemNamespaces(ctx, stores); err != nil {
		t.Fatal(err)
	}
	v := &env{
		ctx:        ctx,
		server:     startWebhookServer(t),
		validating: lookup("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"),
		mutating:   lookup("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"),
		namespaces: lookup("", "v1", "namespaces"),
		configmaps: lookup("", "v1", "configmaps"),
		leases:     lookup("coordination.k8s.io", "v1", "leases"),
	}
	v.validatingHooks = v.validating
	w, err := New(Config{Validating: v.validating, Mutating: v.mutating, Namespaces: v.namespaces, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	v.w = w
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(runCtx)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	select {
	case <-w.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("the webhook configurations' watches did not sync in 10 s")
	}
	return v
}

// await waits (10 s at most) until cond holds.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not after 10 s", what)
}

// known says whether the watch of i holds the configuration name.
func known(i *configInformer, name string) bool {
	_, ok, _ := i.indexer.GetByKey(name)
	return ok
}

// validatingConfig stores a ValidatingWebhookConfiguration of hooks and
// waits until the webhooks know it; it is deleted (and forgotten) at the
// test's end.
func (v *env) validatingConfig(t *testing.T, name string, hooks ...hook) {
	t.Helper()
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, h := range hooks {
		cfg.Webhooks = append(cfg.Webhooks, admissionregistrationv1.ValidatingWebhook{
			Name: h.name, ClientConfig: h.clientConfig(v.server), Rules: h.rules(), FailurePolicy: h.policy(),
			SideEffects: h.effects(), TimeoutSeconds: h.timeoutSeconds(), AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector: h.ns, ObjectSelector: h.obj, MatchConditions: h.conditions,
		})
	}
	if _, err := v.validating.Create(v.ctx, "", cfg, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	await(t, "configuration "+name+" known", func() bool { return known(v.w.factory.validating, name) })
	t.Cleanup(func() { v.deleteConfig(t, v.validating, v.w.factory.validating, name) })
}

func (v *env) mutatingConfig(t *testing.T, name string, hooks ...hook) {
	t.Helper()
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, h := range hooks {
		cfg.Webhooks = append(cfg.Webhooks, admissionregistrationv1.MutatingWebhook{
			Name: h.name, ClientConfig: h.clientConfig(v.server), Rules: h.rules(), FailurePolicy: h.policy(),
			ReinvocationPolicy: h.reinvocation(),
			SideEffects:        h.effects(), TimeoutSeconds: h.timeoutSeconds(), AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector: h.ns, ObjectSelector: h.obj, MatchConditions: h.conditions,
		})
	}
	if _, err := v.mutating.Create(v.ctx, "", cfg, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	await(t, "configuration "+name+" known", func() bool { return known(v.w.factory.mutating, name) })
	t.Cleanup(func() { v.deleteConfig(t, v.mutating, v.w.factory.mutating, name) })
}

func (v *env) deleteConfig(t *testing.T, store *registry.Store, i *configInformer, name string) {
	t.Helper()
	if _, err := store.Delete(v.ctx, "", name, &metav1.DeleteOptions{}, registry.WriteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	await(t, "configuration "+name+" forgotten", func() bool { return !known(i, name) })
}

// create is the admission request of creating ConfigMap namespace/name.
func (v *env) create(namespace, name string, labels map[string]string) *registry.AdmissionRequest {
	return &registry.AdmissionRequest{
		Operation: admission.Create, Resource: v.configmaps.Resource, Namespace: namespace, Name: name,
		Object:  &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}, Data: map[string]string{"k": "v"}},
		Options: &metav1.CreateOptions{},
	}
}

// statusOf is err as the Status a client would get.
func statusOf(t *testing.T, err error) metav1.Status {
	t.Helper()
	var s apierrors.APIStatus
	if !errors.As(err, &s) {
		t.Fatalf("error %v (%T) is not a Status", err, err)
	}
	return s.Status()
}

// wantRefused asserts err is a Status of code, reason and message.
func wantRefused(t *testing.T, err error, code int32, reason metav1.StatusReason, message string) {
	t.Helper()
	if err == nil {
		t.Fatalf("admitted; want %d %q", code, message)
	}
	s := statusOf(t, err)
	if s.Code != code || s.Reason != reason || s.Message != message {
		t.Fatalf("refused with %d %q %q; want %d %q %q", s.Code, s.Reason, s.Message, code, reason, message)
	}
}

// TestValidatingAnswers: a webhook's denial passes its code and message
// through as kube formats them; a webhook not callable refuses under Fail
// and is skipped under Ignore.
func TestValidatingAnswers(t *testing.T) {
	v := newEnv(t)
	unreachable := "https://127.0.0.1:1/nowhere"
	for _, tc := range []struct {
		name    string
		hook    hook
		code    int32
		reason  metav1.StatusReason
		message string
	}{
		{"deny", hook{name: "deny.example.com", path: "/deny"}, 403, metav1.StatusReasonForbidden,
			`admission webhook "deny.example.com" denied the request: no configmaps here`},
		{"code below 400", hook{name: "low.example.com", path: "/deny-200"}, 400, "",
			`admission webhook "low.example.com" denied the request: a code below 400`},
		{"without status", hook{name: "bare.example.com", path: "/deny-bare"}, 400, "",
			`admission webhook "bare.example.com" denied the request without explanation`},
		{"unreachable, Fail", hook{name: "gone.example.com", url: unreachable}, 500, metav1.StatusReasonInternalError,
			`Internal error occurred: failed calling webhook "gone.example.com": failed to call webhook: Post "` + unreachable + `?timeout=10s": dial tcp 127.0.0.1:1: connect: connection refused`},
		{"unreachable, Ignore", hook{name: "gone.example.com", url: unreachable, ignore: true}, 0, "", ""},
		{"allow", hook{name: "allow.example.com", path: "/allow"}, 0, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v.validatingConfig(t, "answers", tc.hook)
			err := v.w.Validate(v.ctx, v.create("default", "cm", nil))
			if tc.code == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			wantRefused(t, err, tc.code, tc.reason, tc.message)
		})
	}
}

// TestService: clientConfig.service is called at
// https://<name>.<namespace>.svc:<port><path>, as kube's default resolver
// has it.
func TestService(t *testing.T) {
	v := newEnv(t)
	v.validatingConfig(t, "service", hook{name: "svc.example.com", timeout: 1, service: &admissionregistrationv1.ServiceReference{
		Namespace: "webhooks", Name: "validator", Path: ptr.To("/validate"), Port: ptr.To[int32](8443),
	}})
	s := statusOf(t, v.w.Validate(v.ctx, v.create("default", "cm", nil)))
	prefix := `Internal error occurred: failed calling webhook "svc.example.com": failed to call webhook: Post "https://validator.webhooks.svc:8443/validate?timeout=1s": `
	if s.Code != 500 || !strings.HasPrefix(s.Message, prefix) {
		t.Fatalf("refused with %d %q; want 500 %q…", s.Code, s.Message, prefix)
	}
}

// TestCustomResource: custom resources are unstructured; a patch changes
// the request's object, and a rule for x/status matches only the status
// subresource.
func TestCustomResource(t *testing.T) {
	v := newEnv(t)
	widgets := &registry.Resource{GroupVersion: schema.GroupVersion{Group: "example.com", Version: "v1"}, Kind: "Widget", Plural: "widgets", Namespaced: true}
	v.mutatingConfig(t, "widgets", hook{name: "patch.example.com", path: "/patch", groups: []string{"example.com"}, resources: []string{"widgets"}})
	v.validatingConfig(t, "widget-status", hook{name: "deny.example.com", path: "/deny", groups: []string{"example.com"}, resources: []string{"widgets/status"}})
	widget := func() *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "w", "namespace": "default"},
			"spec":     map[string]any{"size": int64(1)},
		}}
	}
	create := &registry.AdmissionRequest{Operation: admission.Create, Resource: widgets, Namespace: "default", Name: "w", Object: widget(), Options: &metav1.CreateOptions{}}
	obj := create.Object
	if err := v.w.Mutate(v.ctx, create); err != nil {
		t.Fatal(err)
	}
	u := obj.(*unstructured.Unstructured)
	if create.Object != obj || u.GetLabels()["mutated"] != "yes" || u.Object["spec"].(map[string]any)["size"] != int64(1) {
		t.Fatalf("mutated to %v (the same object: %v); want the label added to it, the spec kept", u.Object, create.Object == obj)
	}
	if got := v.server.calls("/patch"); len(got) != 1 || got[0].Kind != (metav1.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}) {
		t.Fatalf("the mutating webhook received %+v; want one Widget", got)
	}
	update := func(subresource string) *registry.AdmissionRequest {
		return &registry.AdmissionRequest{Operation: admission.Update, Resource: widgets, Subresource: subresource, Namespace: "default", Name: "w",
			Object: widget(), OldObject: widget(), Options: &metav1.UpdateOptions{}}
	}
	if err := v.w.Validate(v.ctx, update("")); err != nil {
		t.Fatalf("an update of the widget refused: %v", err)
	}
	wantRefused(t, v.w.Validate(v.ctx, update("status")), 403, metav1.StatusReasonForbidden,
		`admission webhook "deny.example.com" denied the request: no configmaps here`)
	if got := v.server.calls("/deny"); len(got) != 1 || got[0].SubResource != "status" {
		t.Fatalf("the status webhook received %+v; want one status update", got)
	}
}

// TestTimeout: a webhook slower than its timeoutSeconds fails after it
// (refused under Fail, allowed under Ignore).
func TestTimeout(t *testing.T) {
	v := newEnv(t)
	for _, ignore := range []bool{false, true} {
		t.Run(map[bool]string{false: "Fail", true: "Ignore"}[ignore], func(t *testing.T) {
			v.validatingConfig(t, "slow", hook{name: "slow.example.com", path: "/slow", timeout: 1, ignore: ignore})
			start := time.Now()
			err := v.w.Validate(v.ctx, v.create("default", "cm", nil))
			took := time.Since(start)
			if took < time.Second || took > 2500*time.Millisecond {
				t.Errorf("answered after %v; want about the 1 s timeout", took)
			}
			if ignore {
				if err != nil {
					t.Fatalf("refused under Ignore: %v", err)
				}
				return
			}
			s := statusOf(t, err)
			prefix := `Internal error occurred: failed calling webhook "slow.example.com": failed to call webhook: Post "` + v.server.URL + `/slow?timeout=1s": `
			if s.Code != 500 || !strings.HasPrefix(s.Message, prefix) || !strings.Contains(s.Message, "deadline exceeded") {
				t.Fatalf("refused with %d %q; want 500 %q… deadline exceeded", s.Code, s.Message, prefix)
			}
		})
	}
}

// TestMutate: a JSONPatch is applied to the request's object itself.
func TestMutate(t *testing.T) {
	v := newEnv(t)
	v.mutatingConfig(t, "patch", hook{name: "patch.example.com", path: "/patch"})
	req := v.create("default", "cm", nil)
	cm := req.Object.(*corev1.ConfigMap)
	if err := v.w.Mutate(v.ctx, req); err != nil {
		t.Fatal(err)
	}
	if req.Object != cm {
		t.Fatal("the request's object was replaced; want it changed in place")
	}
	if cm.Labels["mutated"] != "yes" || cm.Data["k"] != "v" || cm.Name != "cm" {
		t.Fatalf("mutated to labels %v data %v name %q; want the label added and the rest kept", cm.Labels, cm.Data, cm.Name)
	}
	if got := len(v.server.calls("/patch")); got != 1 {
		t.Fatalf("the mutating webhook was called %d times; want 1", got)
	}
	// The validating step calls no mutating webhook.
	if err := v.w.Validate(v.ctx, v.create("default", "cm2", nil)); err != nil {
		t.Fatal(err)
	}
	if got := len(v.server.calls("/patch")); got != 1 {
		t.Fatalf("the mutating webhook was called %d times after a Validate; want 1", got)
	}
}

// TestReinvocation: a webhook with reinvocationPolicy IfNeeded is called
// again when a later one changed the object; one with Never is not.
func TestReinvocation(t *testing.T) {
	v := newEnv(t)
	v.mutatingConfig(t, "reinvoke",
		hook{name: "again.example.com", path: "/again", reinvoke: true},
		hook{name: "patch.example.com", path: "/patch"})
	req := v.create("default", "cm", nil)
	if err := v.w.Mutate(v.ctx, req); err != nil {
		t.Fatal(err)
	}
	again, patch := v.server.calls("/again"), v.server.calls("/patch")
	if len(again) != 2 || len(patch) != 1 {
		t.Fatalf("called again.example.com %d times and patch.example.com %d; want 2 and 1", len(again), len(patch))
	}
	if !strings.Contains(string(again[1].Object.Raw), `"mutated":"yes"`) {
		t.Fatalf("the second call was sent %s; want the patched object", again[1].Object.Raw)
	}
	if got := req.Object.(*corev1.ConfigMap).Labels["mutated"]; got != "yes" {
		t.Fatalf("label mutated=%q; want yes", got)
	}
}

// TestMatching: namespaceSelector (the namespace's stored labels),
// objectSelector and matchConditions decide which writes a webhook sees.
func TestMatching(t *testing.T) {
	v := newEnv(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"team": "a"}}}
	if _, err := v.namespaces.Create(v.ctx, "", ns, registry.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	denied := `admission webhook "deny.example.com" denied the request: no configmaps here`
	for _, tc := range []struct {
		name   string
		hook   hook
		denied []*registry.AdmissionRequest
		passed []*registry.AdmissionRequest
	}{
		{
			name:   "namespaceSelector",
			hook:   hook{ns: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
			denied: []*registry.AdmissionRequest{v.create("team-a", "cm", nil)},
			passed: []*registry.AdmissionRequest{v.create("default", "cm", nil)},
		},
		{
			name:   "objectSelector",
			hook:   hook{obj: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}},
			denied: []*registry.AdmissionRequest{v.create("default", "cm", map[string]string{"app": "x"})},
			passed: []*registry.AdmissionRequest{v.create("default", "cm", map[string]string{"app": "y"}), v.create("default", "cm", nil)},
		},
		{
			name:   "matchConditions",
			hook:   hook{conditions: []admissionregistrationv1.MatchCondition{{Name: "deny-prefix", Expression: `object.metadata.name.startsWith("deny-")`}}},
			denied: []*registry.AdmissionRequest{v.create("default", "deny-me", nil)},
			passed: []*registry.AdmissionRequest{v.create("default", "keep-me", nil)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.hook
			h.name, h.path = "deny.example.com", "/deny"
			v.validatingConfig(t, "matching", h)
			before := len(v.server.calls("/deny"))
			for _, req := range tc.denied {
				wantRefused(t, v.w.Validate(v.ctx, req), 403, metav1.StatusReasonForbidden, denied)
			}
			for _, req := range tc.passed {
				if err := v.w.Validate(v.ctx, req); err != nil {
					t.Fatalf("%s/%s refused: %v", req.Namespace, req.Name, err)
				}
			}
			if got, want := len(v.server.calls("/deny"))-before, len(tc.denied); got != want {
				t.Fatalf("the webhook was called %d times; want %d (only for the matching writes)", got, want)
			}
		})
	}
}

// TestDryRun: webhooks without side effects (None, NoneOnDryRun) are
// called on a dry run, told it is one. (v1 stores no other sideEffects.)
func TestDryRun(t *testing.T) {
	v := newEnv(t)
	for _, effects := range []admissionregistrationv1.SideEffectClass{admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.SideEffectClassNoneOnDryRun} {
		t.Run(string(effects), func(t *testing.T) {
			v.validatingConfig(t, "dryrun", hook{name: "allow.example.com", path: "/allow", sideEffects: effects})
			before := len(v.server.calls("/allow"))
			req := v.create("default", "cm", nil)
			req.DryRun = true
			req.Options = &metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
			if err := v.w.Validate(v.ctx, req); err != nil {
				t.Fatal(err)
			}
			calls := v.server.calls("/allow")
			if len(calls) != before+1 {
				t.Fatalf("called %d times; want once", len(calls)-before)
			}
			if got := calls[len(calls)-1].DryRun; got == nil || !*got {
				t.Fatalf("the webhook was told dryRun %v; want true", got)
			}
		})
	}
}

// TestDeletedConfigurationStopsCalls: once the watch has seen a
// configuration deleted, its webhook is not called any more.
func TestDeletedConfigurationStopsCalls(t *testing.T) {
	v := newEnv(t)
	t.Run("stored", func(t *testing.T) {
		v.validatingConfig(t, "deny", hook{name: "deny.example.com", path: "/deny"})
		if err := v.w.Validate(v.ctx, v.create("default", "cm", nil)); err == nil {
			t.Fatal("admitted while the denying configuration is stored")
		}
	}) // its cleanup deletes it and waits until the watch has seen that
	if err := v.w.Validate(v.ctx, v.create("default", "cm", nil)); err != nil {
		t.Fatalf("refused after the configuration was deleted: %v", err)
	}
	if got := len(v.server.calls("/deny")); got != 1 {
		t.Fatalf("the webhook was called %d times; want 1 (none after its deletion)", got)
	}
}

// TestMayMutate: the store may refuse an invalid replacement before
// reading etcd only while no mutating configuration is stored.
func TestMayMutate(t *testing.T) {
	v := newEnv(t)
	await(t, "configurations read", func() bool { return v.w.factory.mutating.HasSynced() })
	if v.w.MayMutate(registry.ConfigMaps) {
		t.Fatal("MayMutate with no mutating configuration stored; want false")
	}
	t.Run("stored", func(t *testing.T) {
		v.mutatingConfig(t, "patch", hook{name: "patch.example.com", path: "/patch"})
		if !v.w.MayMutate(registry.ConfigMaps) {
			t.Fatal("MayMutate false while a mutating configuration is stored")
		}
	}) // its cleanup deletes it and waits until the watch has seen that
	if v.w.MayMutate(registry.ConfigMaps) {
		t.Fatal("MayMutate after the mutating configuration was deleted; want false")
	}
}

// testRequests is the minimum filters.WithAuth needs of the server.
type testRequests struct{}

func (testRequests) Parsed(*http.Request, *filters.Attributes) {}
func (testRequests) Refused(*http.Request, filters.Attributes) {}
func (testRequests) Logger(*http.Request) *slog.Logger         { return slog.New(slog.DiscardHandler) }

// userContext is the context of a request of token's user, authenticated
// by Concord's filter.
func userContext(t *testing.T, ctx context.Context, token string, users map[string]filters.UserInfo) context.Context {
	t.Helper()
	var got context.Context
	h := filters.WithAuth(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got = context.WithoutCancel(r.Context())
	}), &filters.Authentication{Tokens: users}, nil, func(w http.ResponseWriter, _ *http.Request, err error) {
		t.Fatalf("request refused: %v", err)
	}, testRequests{})
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/version", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	h.ServeHTTP(httptest.NewRecorder(), r)
	if got == nil {
		t.Fatal("the request did not reach the handler")
	}
	return got
}

// TestReview: what a webhook receives on an update and a delete.
func TestReview(t *testing.T) {
	v := newEnv(t)
	v.validatingConfig(t, "review", hook{name: "allow.example.com", path: "/allow"})
	ctx := userContext(t, v.ctx, "alice-token", map[string]filters.UserInfo{
		"alice-token": {Name: "alice", UID: "alice-uid", Groups: []string{"devs"}},
	})
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "default"}, Data: map[string]string{"k": "old"}}
	update := v.create("default", "cm", nil)
	update.Operation, update.OldObject, update.Options = admission.Update, old, &metav1.UpdateOptions{FieldManager: "kubectl"}
	if err := v.w.Validate(ctx, update); err != nil {
		t.Fatal(err)
	}
	del := &registry.AdmissionRequest{
		Operation: admission.Delete, Resource: v.configmaps.Resource, Namespace: "default", Name: "cm",
		OldObject: old, Options: &metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
	}
	if err := v.w.Validate(ctx, del); err != nil {
		t.Fatal(err)
	}
	calls := v.server.calls("/allow")
	if len(calls) != 2 {
		t.Fatalf("the webhook was called %d times; want 2", len(calls))
	}
	for i, want := range []struct {
		op                admissionv1.Operation
		object, oldObject string
		options           string
	}{
		{admissionv1.Update, `"k":"v"`, `"k":"old"`, `{"kind":"UpdateOptions","apiVersion":"meta.k8s.io/v1","fieldManager":"kubectl"}`},
		{admissionv1.Delete, "", `"k":"old"`, `{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/v1","gracePeriodSeconds":0}`},
	} {
		got := calls[i]
		if got.UID == "" || got.Operation != want.op || got.Name != "cm" || got.Namespace != "default" ||
			got.Kind != (metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}) ||
			got.Resource != (metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"}) ||
			got.RequestKind == nil || *got.RequestKind != got.Kind || got.DryRun == nil || *got.DryRun {
			t.Errorf("%s: received uid %q operation %s %s/%s kind %v resource %v requestKind %v dryRun %v", want.op, got.UID, got.Operation, got.Namespace, got.Name, got.Kind, got.Resource, got.RequestKind, got.DryRun)
		}
		if got.UserInfo.Username != "alice" || got.UserInfo.UID != "alice-uid" || strings.Join(got.UserInfo.Groups, ",") != "devs,system:authenticated" {
			t.Errorf("%s: received userInfo %+v; want alice, alice-uid, devs and system:authenticated", want.op, got.UserInfo)
		}
		if want.object == "" && got.Object.Raw != nil || !strings.Contains(string(got.Object.Raw), want.object) {
			t.Errorf("%s: received object %s; want one with %s", want.op, got.Object.Raw, want.object)
		}
		if !strings.Contains(string(got.OldObject.Raw), want.oldObject) {
			t.Errorf("%s: received oldObject %s; want one with %s", want.op, got.OldObject.Raw, want.oldObject)
		}
		if string(got.Options.Raw) != want.options {
			t.Errorf("%s: received options %s; want %s", want.op, got.Options.Raw, want.options)
		}
	}
	if uid := calls[0].UID; uid == calls[1].UID {
		t.Errorf("two requests were sent the same uid %q", uid)
	}
}

// TestExempt: the webhook configurations themselves (as kube) and the
// concord- Leases of kube-system are never sent to a webhook; other Leases
// are.
func TestExempt(t *testing.T) {
	v := newEnv(t)
	v.validatingConfig(t, "everything", hook{name: "deny.example.com", path: "/deny", groups: []string{"*"}, resources: []string{"*"}})
	lease := func(namespace, name string) *registry.AdmissionRequest {
		return &registry.AdmissionRequest{
			Operation: admission.Create, Resource: v.leases.Resource, Namespace: namespace, Name: name,
			Object: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}, Options: &metav1.CreateOptions{},
		}
	}
	config := &registry.AdmissionRequest{
		Operation: admission.Create, Resource: v.validatingHooks.Resource, Name: "another",
		Object: &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "another"}}, Options: &metav1.CreateOptions{},
	}
	for _, req := range []*registry.AdmissionRequest{lease(metav1.NamespaceSystem, "concord-garbage-collector"), config} {
		if err := v.w.Validate(v.ctx, req); err != nil {
			t.Errorf("%s %s/%s refused: %v", req.Resource.Plural, req.Namespace, req.Name, err)
		}
	}
	for _, req := range []*registry.AdmissionRequest{lease(metav1.NamespaceSystem, "other"), lease("default", "concord-garbage-collector")} {
		if err := v.w.Validate(v.ctx, req); err == nil {
			t.Errorf("lease %s/%s admitted; want it sent to the denying webhook", req.Namespace, req.Name)
		}
	}
	if got := len(v.server.calls("/deny")); got != 2 {
		t.Fatalf("the webhook was called %d times; want 2", got)
	}
}

// TestMetrics: kube's plugins count each call in kube's
// apiserver_admission_webhook_* metrics, registered in component-base's
// legacyregistry (which /metrics serves them from: apiserver/kubemetrics.go).
func TestMetrics(t *testing.T) {
	v := newEnv(t)
	v.validatingConfig(t, "metrics", hook{name: "metrics.example.com", path: "/deny"})
	series := []struct {
		family string
		labels map[string]string
	}{
		{"apiserver_admission_webhook_rejection_count", map[string]string{"name": "metrics.example.com", "type": "validating", "operation": "CREATE", "error_type": "no_error", "rejection_code": "403"}},
		{"apiserver_admission_webhook_request_total", map[string]string{"name": "metrics.example.com", "type": "validating", "operation": "CREATE", "code": "403", "rejected": "true"}},
		{"apiserver_admission_webhook_admission_duration_seconds", map[string]string{"name": "metrics.example.com", "type": "validating", "operation": "CREATE", "rejected": "true"}},
	}
	// The registry is the process's: the counts before this test's call.
	gather := func() []uint64 {
		t.Helper()
		families, err := legacyregistry.DefaultGatherer.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var counts []uint64
		for _, s := range series {
			counts = append(counts, sampleCount(families, s.family, s.labels))
		}
		return counts
	}
	before := gather()
	if err := v.w.Validate(v.ctx, v.create("default", "cm", nil)); err == nil {
		t.Fatal("admitted; want the denial")
	}
	for i, after := range gather() {
		if after-before[i] != 1 {
			t.Errorf("%s%v counted %d more; want 1", series[i].family, series[i].labels, after-before[i])
		}
	}
}

// sampleCount is the counter's value, or the histogram's count, of the
// series of family with (at least) labels.
func sampleCount(families []*dto.MetricFamily, family string, labels map[string]string) uint64 {
	for _, f := range families {
		if f.GetName() != family {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			if m.GetHistogram() != nil {
				return m.GetHistogram().GetSampleCount()
			}
			return uint64(m.GetCounter().GetValue())
		}
	}
	return 0
}
