package e2e

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
	"fmt"
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// Bounds of the admission tests.
const (
	admissionEffectWait = 10 * time.Second // for a configuration to take effect on a replica
	admissionPoll       = 20 * time.Millisecond
	admissionRaceRounds = 200
	admissionRaceBound  = 2 * time.Minute // all the rounds together
	admissionStopWait   = 5 * time.Second // for a deleted configuration to stop its denials
)

// denyMessage is what the test's webhook answers for a ConfigMap labelled
// deny=yes.
const denyMessage = "configmaps labelled deny=yes are not admitted"

// admissionWebhook is an HTTPS admission webhook on 127.0.0.1 with a CA
// made by the test: /validate refuses ConfigMaps labelled deny=yes, /mutate
// adds the label mutated=yes by a JSONPatch. It keeps every AdmissionReview
// request it received.
type admissionWebhook struct {
	*httptest.Server
	caPEM []byte
	mu    sync.Mutex
	got   []admissionv1.AdmissionRequest
}

func startAdmissionWebhook(t *testing.T) *admissionWebhook {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e webhook CA"},
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
	w := &admissionWebhook{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	w.Server = httptest.NewUnstartedServer(http.HandlerFunc(w.serve))
	w.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	w.StartTLS()
	t.Cleanup(w.Close)
	return w
}

func (w *admissionWebhook) serve(rw http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(rw, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	w.got = append(w.got, *review.Request)
	w.mu.Unlock()
	var cm corev1.ConfigMap
	if err := json.Unmarshal(review.Request.Object.Raw, &cm); err != nil {
		http.Error(rw, "not a ConfigMap", http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	switch r.URL.Path {
	case "/validate":
		if cm.Labels["deny"] == "yes" {
			resp.Allowed = false
			resp.Result = &metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: denyMessage}
		}
	case "/mutate":
		patch := `[{"op":"add","path":"/metadata/labels/mutated","value":"yes"}]`
		if cm.Labels == nil {
			patch = `[{"op":"add","path":"/metadata/labels","value":{"mutated":"yes"}}]`
		}
		resp.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
		resp.Patch = []byte(patch)
	}
	review.Response = resp
	review.Request = nil
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(&review)
}

// received is the request the webhook got for ConfigMap name, or nil.
func (w *admissionWebhook) received(name string) *admissionv1.AdmissionRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.got {
		if w.got[i].Name == name {
			return &w.got[i]
		}
	}
	return nil
}

// configMapWebhook is one webhook on ConfigMap writes at url, for the
// objects labelled as selector says (all when nil).
func configMapWebhook(name, url string, caPEM []byte, policy admissionregistrationv1.FailurePolicyType, selector map[string]string) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name:         name,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
		}},
		FailurePolicy:           ptr.To(policy),
		ObjectSelector:          &metav1.LabelSelector{MatchLabels: selector},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
	}
}

func validatingConfig(name string, hooks ...admissionregistrationv1.ValidatingWebhook) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: hooks}
}

func labelledConfigMap(name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: map[string]string{"k": "v"}}
}

// dryRunCreate creates cm in namespace default with dryRun=All: the
// webhooks are called (their sideEffects are None), nothing is stored.
func dryRunCreate(ctx context.Context, client kubernetes.Interface, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	return client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
}

// waitAdmission polls a dry-run create of cm until done says the answer
// shows the configuration in effect, for at most admissionEffectWait (a
// replica learns of a configuration through its watch).
func waitAdmission(t *testing.T, ctx context.Context, client kubernetes.Interface, what string, cm *corev1.ConfigMap, done func(*corev1.ConfigMap, error) bool) {
	t.Helper()
	deadline := time.Now().Add(admissionEffectWait)
	for {
		got, err := dryRunCreate(ctx, client, cm)
		if done(got, err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not in effect after %s; the last dry-run create of %s answered %v, %v", what, admissionEffectWait, cm.Name, got, err)
		}
		time.Sleep(admissionPoll)
	}
}

func denied(_ *corev1.ConfigMap, err error) bool { return apierrors.IsForbidden(err) }

// TestAdmissionWebhooks runs the secure binary (the kubeconfig's user is
// concord-admin, O=system:masters) with an HTTPS webhook made by the test:
// a validating webhook's denial as kubectl shows it, a mutating webhook's
// JSONPatch stored but owned by no field manager, both failure policies
// for an unreachable webhook, a matchCondition using authorizer (which
// Concord does not give), and the AdmissionReview the webhook got.
func TestAdmissionWebhooks(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	tmp := t.TempDir()
	args := append(append([]string{}, secureFlags...), "--data-dir", filepath.Join(tmp, "data"))
	srv := startConcord(t, "concord (secure)", t.TempDir(), args...)
	k := &kubectlSession{srv: srv, cacheDir: filepath.Join(tmp, "kubectl-cache"), tmp: tmp}
	cfg, err := clientcmd.BuildConfigFromFlags("", srv.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = requestTimeout
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	hook := startAdmissionWebhook(t)
	hooks := client.AdmissionregistrationV1()
	cms := client.CoreV1().ConfigMaps("default")

	// (a) A validating webhook refuses ConfigMaps labelled deny=yes.
	if _, err := hooks.ValidatingWebhookConfigurations().Create(ctx, validatingConfig("deny-labelled",
		configMapWebhook("deny.e2e.concord.test", hook.URL+"/validate", hook.caPEM, admissionregistrationv1.Fail, nil)), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ValidatingWebhookConfiguration deny-labelled: %v", err)
	}
	waitAdmission(t, ctx, client, "deny-labelled", labelledConfigMap("probe", map[string]string{"deny": "yes"}), denied)

	out, errOut, code := k.runCode(t, "create", "-f", k.writeFile(t, "denied.yaml",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: denied\n  labels:\n    deny: \"yes\"\ndata:\n  k: v\n", 0o600))
	wantErr := `Error from server (Forbidden): error when creating "` + filepath.Join(tmp, "denied.yaml") +
		`": admission webhook "deny.e2e.concord.test" denied the request: ` + denyMessage + "\n"
	if code != 1 || out != "" || errOut != wantErr {
		t.Errorf("kubectl create of a ConfigMap labelled deny=yes: exit %d, stdout %q, stderr %q; want exit 1, no stdout, stderr %q", code, out, errOut, wantErr)
	}
	if _, err := cms.Get(ctx, "denied", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("GET of the denied ConfigMap: %v; want NotFound (nothing stored)", err)
	}
	if out := k.run(t, "create", "configmap", "allowed", "--from-literal=k=v"); out != "configmap/allowed created\n" {
		t.Errorf("kubectl create configmap allowed printed %q; want %q", out, "configmap/allowed created\n")
	}
	if got := k.configMap(t, "default", "allowed"); got.Data["k"] != "v" {
		t.Errorf("stored ConfigMap allowed: data %v; want k=v", got.Data)
	}

	// (d) The AdmissionReview of kubectl's create: the kubeconfig's user.
	checkReview(t, hook.received("allowed"))

	// (b) A mutating webhook adds a label by JSONPatch.
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "add-label"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{func() admissionregistrationv1.MutatingWebhook {
			v := configMapWebhook("mutate.e2e.concord.test", hook.URL+"/mutate", hook.caPEM, admissionregistrationv1.Fail, map[string]string{"mutate": "yes"})
			return admissionregistrationv1.MutatingWebhook{
				Name: v.Name, ClientConfig: v.ClientConfig, Rules: v.Rules, FailurePolicy: v.FailurePolicy,
				ObjectSelector: v.ObjectSelector, SideEffects: v.SideEffects, AdmissionReviewVersions: v.AdmissionReviewVersions,
			}
		}()},
	}
	if _, err := hooks.MutatingWebhookConfigurations().Create(ctx, mutating, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create MutatingWebhookConfiguration add-label: %v", err)
	}
	waitAdmission(t, ctx, client, "add-label", labelledConfigMap("probe", map[string]string{"mutate": "yes"}),
		func(cm *corev1.ConfigMap, err error) bool { return err == nil && cm.Labels["mutated"] == "yes" })
	if _, err := cms.Create(ctx, labelledConfigMap("mutated", map[string]string{"mutate": "yes"}), metav1.CreateOptions{FieldManager: "e2e"}); err != nil {
		t.Fatalf("create ConfigMap mutated: %v", err)
	}
	stored := k.managedConfigMap(t, "mutated")
	if want := map[string]string{"mutate": "yes", "mutated": "yes"}; !maps.Equal(stored.Labels, want) {
		t.Errorf("stored ConfigMap mutated: labels %v; want %v", stored.Labels, want)
	}
	if len(stored.ManagedFields) != 1 || stored.ManagedFields[0].Manager != "e2e" {
		t.Errorf("stored ConfigMap mutated: managedFields %s; want one entry, e2e's", describeManaged(stored.ManagedFields))
	}
	for _, e := range stored.ManagedFields {
		if keys := fieldKeys(fieldsOf(t, &e), "f:metadata", "f:labels"); !slices.Equal(keys, []string{".", "f:mutate"}) {
			t.Errorf("stored ConfigMap mutated: %s owns labels %q; want only the map and f:mutate (the webhook's label is nobody's)", e.Manager, keys)
		}
	}

	// (c) An unreachable webhook: failurePolicy Fail refuses with a 500,
	// Ignore admits. A matchCondition using authorizer fails (Concord gives
	// the webhooks no authorizer), and Fail refuses. All are in one
	// configuration, so once the first is in effect so are the others.
	const unreachable = "https://127.0.0.1:1/"
	authz := configMapWebhook("authz.e2e.concord.test", unreachable, hook.caPEM, admissionregistrationv1.Fail, map[string]string{"policy": "authz"})
	const authzExpr = `!authorizer.group("").resource("configmaps").check("delete").allowed()`
	authz.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "not-admins", Expression: authzExpr}}
	if _, err := hooks.ValidatingWebhookConfigurations().Create(ctx, validatingConfig("unreachable",
		configMapWebhook("fail.e2e.concord.test", unreachable, hook.caPEM, admissionregistrationv1.Fail, map[string]string{"policy": "fail"}),
		configMapWebhook("ignore.e2e.concord.test", unreachable, hook.caPEM, admissionregistrationv1.Ignore, map[string]string{"policy": "ignore"}),
		authz), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ValidatingWebhookConfiguration unreachable: %v", err)
	}
	waitAdmission(t, ctx, client, "unreachable", labelledConfigMap("probe", map[string]string{"policy": "fail"}),
		func(_ *corev1.ConfigMap, err error) bool { return apierrors.IsInternalError(err) })
	_, err = cms.Create(ctx, labelledConfigMap("policy-fail", map[string]string{"policy": "fail"}), metav1.CreateOptions{})
	wantMsg := `Internal error occurred: failed calling webhook "fail.e2e.concord.test": failed to call webhook: Post "` +
		unreachable + `?timeout=10s": dial tcp 127.0.0.1:1: connect: connection refused`
	if st, ok := err.(apierrors.APIStatus); !ok || st.Status().Code != http.StatusInternalServerError ||
		st.Status().Reason != metav1.StatusReasonInternalError || st.Status().Message != wantMsg {
		t.Errorf("create with failurePolicy Fail and an unreachable webhook: %v; want 500 InternalError %q", err, wantMsg)
	}
	if _, err := cms.Get(ctx, "policy-fail", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("GET of the ConfigMap refused by failurePolicy Fail: %v; want NotFound", err)
	}
	if _, err := cms.Create(ctx, labelledConfigMap("policy-ignore", map[string]string{"policy": "ignore"}), metav1.CreateOptions{}); err != nil {
		t.Errorf("create with failurePolicy Ignore and an unreachable webhook: %v; want it admitted", err)
	}
	if got, err := cms.Get(ctx, "policy-ignore", metav1.GetOptions{}); err != nil || got.Labels["policy"] != "ignore" {
		t.Errorf("GET of the ConfigMap admitted by failurePolicy Ignore: %v, %v; want it stored", got, err)
	}
	_, err = cms.Create(ctx, labelledConfigMap("policy-authz", map[string]string{"policy": "authz"}), metav1.CreateOptions{})
	wantMsg = `configmaps "policy-authz" is forbidden: expression '` + authzExpr + `' resulted in error: no such attribute(s): authorizer`
	if st, ok := err.(apierrors.APIStatus); !ok || st.Status().Code != http.StatusForbidden || st.Status().Message != wantMsg {
		t.Errorf("create matched by a matchCondition using authorizer: %v; want 403 %q", err, wantMsg)
	}
	srv.stopCleanly(t)
}

// checkReview asserts the AdmissionReview request of kubectl create
// configmap allowed.
func checkReview(t *testing.T, got *admissionv1.AdmissionRequest) {
	t.Helper()
	if got == nil {
		t.Fatal("the webhook received no AdmissionReview for ConfigMap allowed")
	}
	if got.UserInfo.Username != "concord-admin" || !slices.Equal(got.UserInfo.Groups, []string{"system:masters", "system:authenticated"}) {
		t.Errorf("AdmissionReview userInfo = %+v; want concord-admin in [system:masters system:authenticated] (the kubeconfig's certificate)", got.UserInfo)
	}
	if got.Operation != admissionv1.Create || got.Namespace != "default" || got.Name != "allowed" || got.SubResource != "" || ptr.Deref(got.DryRun, true) {
		t.Errorf("AdmissionReview: operation %q, namespace %q, name %q, subresource %q, dryRun %v; want CREATE of default/allowed, not a dry run",
			got.Operation, got.Namespace, got.Name, got.SubResource, ptr.Deref(got.DryRun, true))
	}
	if got.Kind != (metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}) || got.Resource != (metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"}) {
		t.Errorf("AdmissionReview kind %v, resource %v; want v1 ConfigMap, v1 configmaps", got.Kind, got.Resource)
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal(got.Object.Raw, &cm); err != nil {
		t.Fatalf("AdmissionReview object: %v; raw %s", err, got.Object.Raw)
	}
	if cm.Name != "allowed" || cm.Namespace != "default" || !maps.Equal(cm.Data, map[string]string{"k": "v"}) || cm.UID == "" {
		t.Errorf("AdmissionReview object: %s; want ConfigMap default/allowed with data k=v and a uid", got.Object.Raw)
	}
	if len(got.OldObject.Raw) != 0 {
		t.Errorf("AdmissionReview oldObject of a create: %s; want none", got.OldObject.Raw)
	}
	var opts metav1.CreateOptions
	if err := json.Unmarshal(got.Options.Raw, &opts); err != nil || opts.FieldManager != "kubectl-create" {
		t.Errorf("AdmissionReview options: %s (%v); want CreateOptions with fieldManager kubectl-create", got.Options.Raw, err)
	}
}

// TestAdmissionAcrossReplicas measures how often a write through replica
// B escapes a denying configuration created through replica A just before
// (B learns of it through its watch, milliseconds later: the take-effect
// guard is not built yet, so escapes are logged, not failed), and fails if
// deleting the configuration does not stop B's denials within
// admissionStopWait.
func TestAdmissionAcrossReplicas(t *testing.T) {
	t.Parallel()
	replicas := startReplicas(t, 2)
	a, b := replicaClient(t, replicas[0].proc), replicaClient(t, replicas[1].proc)
	hook := startAdmissionWebhook(t)
	ctx, cancel := context.WithTimeout(t.Context(), admissionRaceBound)
	defer cancel()
	config := validatingConfig("deny-race",
		configMapWebhook("deny.e2e.concord.test", hook.URL+"/validate", hook.caPEM, admissionregistrationv1.Fail, nil))
	denyLabels := map[string]string{"deny": "yes"}

	escapes, rounds := 0, 0
	for ; rounds < admissionRaceRounds; rounds++ {
		if _, err := a.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, config, metav1.CreateOptions{}); err != nil {
			t.Fatalf("round %d: create the configuration through A: %v", rounds, err)
		}
		name := fmt.Sprintf("race-%03d", rounds)
		_, err := b.CoreV1().ConfigMaps("default").Create(ctx, labelledConfigMap(name, denyLabels), metav1.CreateOptions{})
		switch {
		case err == nil:
			escapes++
		case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), denyMessage):
			t.Fatalf("round %d: create through B: %v; want 201 or the webhook's denial", rounds, err)
		}
		if err := a.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, config.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("round %d: delete the configuration through A: %v", rounds, err)
		}
		// Until B stops denying, the next round would measure nothing.
		probe := labelledConfigMap("probe", denyLabels)
		deadline := time.Now().Add(admissionStopWait)
		for {
			_, err := dryRunCreate(ctx, b, probe)
			if err == nil {
				break
			}
			if !apierrors.IsForbidden(err) || time.Now().After(deadline) {
				t.Fatalf("round %d: %s after deleting the configuration, a dry-run create through B answers %v; want it admitted", rounds, admissionStopWait, err)
			}
			time.Sleep(admissionPoll)
		}
	}
	t.Logf("%d of %d writes through B right after the configuration's 201 through A escaped it (not denied)", escapes, rounds)
	for _, r := range replicas {
		r.stopCleanly(t)
	}
}
