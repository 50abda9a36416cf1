package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// policyEnv is one secure binary (RBAC,Policy; the kubeconfig's user is
// concord-admin in system:masters) driven by kubectl and client-go.
type policyEnv struct {
	k      *kubectlSession
	client kubernetes.Interface
	ctx    context.Context
	args   []string // the binary's, for a restart
}

// policyFields are what every manifest of these tests sets, since the
// policies are not defaulted yet: selectors that match everything and
// matchPolicy Equivalent.
const policyFields = `    namespaceSelector: {}
    objectSelector: {}
    matchPolicy: Equivalent
`

// configMapPolicy is ValidatingAdmissionPolicy name on ConfigMap creates
// and updates, failurePolicy Fail, with spec holding the rest of its spec
// (indented by two spaces).
func configMapPolicy(name, spec string) string {
	return `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: ` + name + `
spec:
  failurePolicy: Fail
  matchConstraints:
` + policyFields + `    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["configmaps"]
      scope: "*"
` + spec
}

// policyBinding is ValidatingAdmissionPolicyBinding name of policy with
// actions, matching what match says (its matchResources' selectors,
// indented by four spaces; everything when empty), with spec holding the
// rest of its spec.
func policyBinding(name, policy, actions, match, spec string) string {
	if match == "" {
		match = "    namespaceSelector: {}\n    objectSelector: {}\n"
	}
	return `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: ` + name + `
spec:
  policyName: ` + policy + `
  validationActions: [` + actions + `]
  matchResources:
    matchPolicy: Equivalent
` + match + spec
}

// maxKeysPolicy is policy p: at most two keys in a ConfigMap's data.
var maxKeysPolicy = configMapPolicy("p", `  validations:
  - expression: "!has(object.data) || size(object.data) <= 2"
    message: at most two keys
`)

// startPolicyEnv starts the binary and makes the widgets CRD (the
// example.com Widgets of crd_test.go).
func startPolicyEnv(t *testing.T) *policyEnv {
	t.Helper()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	tmp := t.TempDir()
	args := append(append([]string{}, rbacFlags...), "--data-dir", filepath.Join(tmp, "data"))
	srv := startConcord(t, "concord (RBAC)", t.TempDir(), args...)
	e := &policyEnv{k: &kubectlSession{srv: srv, cacheDir: filepath.Join(tmp, "kubectl-cache"), tmp: tmp}, args: args}
	e.client = kubeconfigClient(t, srv.kubeconfig)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	t.Cleanup(cancel)
	e.ctx = ctx
	e.k.run(t, "apply", "-f", e.k.writeFile(t, "widgets-crd.yaml", widgetsCRDManifest, 0o600))
	e.k.run(t, "wait", "--for=condition=Established", "--timeout=20s", "crd/widgets.example.com")
	return e
}

func kubeconfigClient(t *testing.T, kubeconfig string) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout, cfg.QPS = requestTimeout, -1
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// apply writes manifest to file and kubectl apply -f's it; stdout must be
// want, a line for each object. What the file holds is deleted with
// kubectl delete -f at the test's end.
func (e *policyEnv) apply(t *testing.T, file, manifest, want string) string {
	t.Helper()
	path := e.k.writeFile(t, file, manifest, 0o600)
	if out := e.k.run(t, "apply", "-f", path); out != want {
		t.Fatalf("kubectl apply -f %s printed %q; want %q", file, out, want)
	}
	return path
}

// applyDeleted is apply, and the objects are deleted at the test's end
// (a policy deleted is no longer enforced once the delete returned).
func (e *policyEnv) applyDeleted(t *testing.T, file, manifest, want string) {
	t.Helper()
	path := e.apply(t, file, manifest, want)
	t.Cleanup(func() { e.deleteFile(t, path) })
}

// deleteFile runs kubectl delete -f path in a test's cleanup, where the
// test's context is done already.
func (e *policyEnv) deleteFile(t *testing.T, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlPath, "--kubeconfig", e.k.srv.kubeconfig, "--cache-dir", e.k.cacheDir, "delete", "-f", path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("kubectl delete -f %s: %v\n%s", path, err, out)
	}
}

// kubectl runs kubectl and asserts its exit code, stdout and stderr.
func (e *policyEnv) kubectl(t *testing.T, wantCode int, wantOut, wantErr string, args ...string) {
	t.Helper()
	out, errOut, code := e.k.runCode(t, args...)
	if code != wantCode || out != wantOut || errOut != wantErr {
		t.Errorf("kubectl %s: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr %q",
			strings.Join(args, " "), code, out, errOut, wantCode, wantOut, wantErr)
	}
}

// configMap is ConfigMap namespace/name with n keys (k1…) and labels.
func configMap(namespace, name string, n int, labels map[string]string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}, Data: map[string]string{}}
	for i := 1; i <= n; i++ {
		cm.Data[fmt.Sprintf("k%d", i)] = "v"
	}
	return cm
}

// configMapManifest is configMap as YAML.
func configMapManifest(namespace, name string, n int) string {
	s := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: " + namespace + "\ndata:\n"
	for i := 1; i <= n; i++ {
		s += fmt.Sprintf("  k%d: v\n", i)
	}
	return s
}

// wantAdmitted creates cm with client-go and asserts it was stored as
// sent.
func (e *policyEnv) wantAdmitted(t *testing.T, cm *corev1.ConfigMap) {
	t.Helper()
	if _, err := e.client.CoreV1().ConfigMaps(cm.Namespace).Create(e.ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Errorf("create ConfigMap %s/%s: %v; want it admitted", cm.Namespace, cm.Name, err)
		return
	}
	got, err := e.client.CoreV1().ConfigMaps(cm.Namespace).Get(e.ctx, cm.Name, metav1.GetOptions{})
	if err != nil || !maps.Equal(got.Data, cm.Data) {
		t.Errorf("GET of the admitted ConfigMap %s/%s: %v, %v; want data %v", cm.Namespace, cm.Name, got, err, cm.Data)
	}
}

// wantRefused creates cm with client-go, asserts the Status of the
// refusal, and that nothing was stored.
func (e *policyEnv) wantRefused(t *testing.T, cm *corev1.ConfigMap, code int32, reason metav1.StatusReason, message string) {
	t.Helper()
	_, err := e.client.CoreV1().ConfigMaps(cm.Namespace).Create(e.ctx, cm, metav1.CreateOptions{})
	wantStatus(t, "create ConfigMap "+cm.Namespace+"/"+cm.Name, err, code, reason, message)
	if _, err := e.client.CoreV1().ConfigMaps(cm.Namespace).Get(e.ctx, cm.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("GET of the refused ConfigMap %s/%s: %v; want NotFound (nothing stored)", cm.Namespace, cm.Name, err)
	}
}

func wantStatus(t *testing.T, what string, err error, code int32, reason metav1.StatusReason, message string) {
	t.Helper()
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		t.Errorf("%s: %v; want %d %s %q", what, err, code, reason, message)
		return
	}
	if s := st.Status(); s.Code != code || s.Reason != reason || s.Message != message {
		t.Errorf("%s: %d %s %q; want %d %s %q", what, s.Code, s.Reason, s.Message, code, reason, message)
	}
}

// policyDenied is kube's message of policy p's binding b denying ConfigMap name.
func policyDenied(name, message string) string {
	return `configmaps "` + name + `" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: ` + message
}

const (
	vapCreated     = "validatingadmissionpolicy.admissionregistration.k8s.io/p created\n"
	bindingCreated = "validatingadmissionpolicybinding.admissionregistration.k8s.io/b created\n"
)

// TestAdmissionPolicies drives ValidatingAdmissionPolicies and
// MutatingAdmissionPolicies made with kubectl apply through the secure
// binary: denials as kubectl and client-go see them (kube's 422 Invalid,
// or the validation's reason), warnings, audit, params (ConfigMaps by
// name and by selector, missing, custom resources), namespaceObject,
// authorizer with an impersonated user, and mutations of ConfigMaps and
// custom resources. Each step deletes its policies at its end.
func TestAdmissionPolicies(t *testing.T) {
	t.Parallel()
	e := startPolicyEnv(t)
	k := e.k
	top := t // the binary restarted by a step runs past it
	for _, step := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"deny", func(t *testing.T) {
			e.applyDeleted(t, "deny.yaml", maxKeysPolicy+"---\n"+policyBinding("b", "p", "Deny", "", ""), vapCreated+bindingCreated)
			msg := policyDenied("a", "at most two keys")
			path := k.writeFile(t, "a.yaml", configMapManifest("default", "a", 3), 0o600)
			// kubectl shows a 422 Invalid without causes as kube's do.
			e.kubectl(t, 1, "", `The configmaps "a" is invalid: : ValidatingAdmissionPolicy 'p' with binding 'b' denied request: at most two keys`+"\n", "apply", "-f", path)
			e.kubectl(t, 1, "", "error: failed to create configmap: "+msg+"\n",
				"create", "configmap", "a", "--from-literal=k1=v", "--from-literal=k2=v", "--from-literal=k3=v")
			e.wantRefused(t, configMap("default", "a", 3, nil), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, msg)
			e.kubectl(t, 0, "configmap/a created\n", "", "create", "configmap", "a", "--save-config", "--from-literal=k1=v", "--from-literal=k2=v")
			// An update is admitted by the policy too.
			e.kubectl(t, 1, "", `The configmaps "a" is invalid: : ValidatingAdmissionPolicy 'p' with binding 'b' denied request: at most two keys`+"\n", "apply", "-f", path)
			if got := k.configMap(t, "default", "a"); !maps.Equal(got.Data, map[string]string{"k1": "v", "k2": "v"}) {
				t.Errorf("ConfigMap a after the refused update: data %v; want k1, k2", got.Data)
			}
			// A validation's reason sets the code.
			e.apply(t, "deny-forbidden.yaml", maxKeysPolicy+"    reason: Forbidden\n",
				"validatingadmissionpolicy.admissionregistration.k8s.io/p configured\n")
			e.wantRefused(t, configMap("default", "c", 3, nil), http.StatusForbidden, metav1.StatusReasonForbidden, policyDenied("c", "at most two keys"))
			cPath := k.writeFile(t, "c.yaml", configMapManifest("default", "c", 3), 0o600)
			e.kubectl(t, 1, "", `Error from server (Forbidden): error when creating "`+cPath+`": `+policyDenied("c", "at most two keys")+"\n", "create", "-f", cPath)
			k.run(t, "delete", "configmap", "a")
		}},
		{"expressions and selectors", func(t *testing.T) {
			k.run(t, "create", "namespace", "strict")
			k.run(t, "label", "namespace", "strict", "team=strict")
			k.run(t, "create", "namespace", "lax")
			e.applyDeleted(t, "select.yaml", configMapPolicy("p", `  matchConditions:
  - name: not-exempt
    expression: "!has(object.metadata.labels) || !('exempt' in object.metadata.labels)"
  variables:
  - name: keys
    expression: "has(object.data) ? size(object.data) : 0"
  validations:
  - expression: "variables.keys <= 1"
    messageExpression: "'has ' + string(variables.keys) + ' keys, at most 1 allowed'"
`)+"---\n"+policyBinding("b", "p", "Deny", `    namespaceSelector:
      matchLabels: {team: strict}
    objectSelector:
      matchExpressions: [{key: skip, operator: DoesNotExist}]
`, ""), vapCreated+bindingCreated)
			e.wantRefused(t, configMap("strict", "two", 2, nil), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, policyDenied("two", "has 2 keys, at most 1 allowed"))
			e.wantRefused(t, configMap("strict", "three", 3, map[string]string{"other": "x"}), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, policyDenied("three", "has 3 keys, at most 1 allowed"))
			e.wantAdmitted(t, configMap("strict", "one", 1, nil))
			e.wantAdmitted(t, configMap("strict", "exempt", 2, map[string]string{"exempt": "yes"}))
			e.wantAdmitted(t, configMap("strict", "skipped", 2, map[string]string{"skip": "yes"}))
			e.wantAdmitted(t, configMap("lax", "two", 2, nil))
			// The namespace's labels count from the moment they are set.
			k.run(t, "label", "namespace", "lax", "team=strict")
			e.wantRefused(t, configMap("lax", "three", 3, nil), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, policyDenied("three", "has 3 keys, at most 1 allowed"))
		}},
		{"warn and audit", func(t *testing.T) {
			bindingPath := e.apply(t, "warn.yaml", maxKeysPolicy+"---\n"+policyBinding("b", "p", "Warn", "", ""), vapCreated+bindingCreated)
			t.Cleanup(func() { e.deleteFile(t, bindingPath) })
			path := k.writeFile(t, "warned.yaml", configMapManifest("default", "warned", 3), 0o600)
			e.kubectl(t, 0, "configmap/warned created\n", "Warning: Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': at most two keys\n", "apply", "-f", path)
			if got := k.configMap(t, "default", "warned"); len(got.Data) != 3 {
				t.Errorf("ConfigMap warned: data %v; want the three keys stored", got.Data)
			}
			e.apply(t, "warn.yaml", maxKeysPolicy+"---\n"+policyBinding("b", "p", "Audit", "", ""),
				"validatingadmissionpolicy.admissionregistration.k8s.io/p unchanged\nvalidatingadmissionpolicybinding.admissionregistration.k8s.io/b configured\n")
			path = k.writeFile(t, "audited.yaml", configMapManifest("default", "audited", 3), 0o600)
			e.kubectl(t, 0, "configmap/audited created\n", "", "apply", "-f", path)
			if got := k.configMap(t, "default", "audited"); len(got.Data) != 3 {
				t.Errorf("ConfigMap audited: data %v; want the three keys stored", got.Data)
			}
		}},
		{"params by name", func(t *testing.T) {
			k.run(t, "create", "namespace", "params")
			limits := func(limit string) string {
				return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: limits\n  namespace: params\ndata:\n  limit: \"" + limit + "\"\n"
			}
			e.apply(t, "limits.yaml", limits("2"), "configmap/limits created\n")
			e.applyDeleted(t, "params.yaml", paramsPolicy("ConfigMap", "int(params.data.limit)", "params.data.limit")+"---\n"+
				policyBinding("b", "p", "Deny", checkedOnly, "  paramRef: {name: limits, namespace: params, parameterNotFoundAction: Deny}\n"),
				vapCreated+bindingCreated)
			checked := map[string]string{"check": "params"}
			e.wantRefused(t, configMap("default", "three", 3, checked), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, policyDenied("three", "at most 2 keys"))
			e.wantAdmitted(t, configMap("default", "unchecked", 3, nil))
			// The next write reads the params as they are now.
			e.apply(t, "limits.yaml", limits("3"), "configmap/limits configured\n")
			e.wantAdmitted(t, configMap("default", "three", 3, checked))
			e.wantRefused(t, configMap("default", "four", 4, checked), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, policyDenied("four", "at most 3 keys"))
		}},
		{"params in the object's namespace", func(t *testing.T) {
			// paramRef without a namespace: the params of the written
			// object's namespace (params/limits says 3 by now).
			k.run(t, "-n", "default", "create", "configmap", "limits", "--from-literal=limit=1")
			e.applyDeleted(t, "params.yaml", paramsPolicy("ConfigMap", "int(params.data.limit)", "params.data.limit")+"---\n"+
				policyBinding("b", "p", "Deny", checkedOnly, "  paramRef: {name: limits, parameterNotFoundAction: Deny}\n"),
				vapCreated+bindingCreated)
			checked := map[string]string{"check": "params"}
			e.wantRefused(t, configMap("default", "ns-two", 2, checked), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, policyDenied("ns-two", "at most 1 keys"))
			e.wantAdmitted(t, configMap("params", "ns-two", 2, checked))
			k.run(t, "create", "namespace", "noparams")
			e.wantRefused(t, configMap("noparams", "ns-one", 1, checked), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
				policyDenied("ns-one", "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"))
		}},
		{"params by selector", func(t *testing.T) {
			k.run(t, "-n", "params", "create", "configmap", "small", "--from-literal=limit=1")
			k.run(t, "-n", "params", "label", "configmap", "small", "set=a")
			k.run(t, "-n", "params", "create", "configmap", "large", "--from-literal=limit=10")
			e.applyDeleted(t, "params.yaml", paramsPolicy("ConfigMap", "int(params.data.limit)", "params.data.limit")+"---\n"+
				policyBinding("b", "p", "Deny", checkedOnly, "  paramRef:\n    namespace: params\n    selector: {matchLabels: {set: a}}\n    parameterNotFoundAction: Deny\n"),
				vapCreated+bindingCreated)
			checked := map[string]string{"check": "params"}
			e.wantRefused(t, configMap("default", "two", 2, checked), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, policyDenied("two", "at most 1 keys"))
			// Every selected params object must admit the write.
			k.run(t, "-n", "params", "label", "configmap", "large", "set=a")
			k.run(t, "-n", "params", "patch", "configmap", "small", "--type=merge", "-p", `{"data":{"limit":"5"}}`)
			e.wantAdmitted(t, configMap("default", "five", 5, checked))
			e.wantRefused(t, configMap("default", "six", 6, checked), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, policyDenied("six", "at most 5 keys"))
			k.run(t, "-n", "params", "label", "configmap", "small", "large", "set-")
			e.wantRefused(t, configMap("default", "one", 1, checked), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
				policyDenied("one", "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"))
		}},
		{"params missing", func(t *testing.T) {
			e.applyDeleted(t, "params.yaml", paramsPolicy("ConfigMap", "int(params.data.limit)", "params.data.limit")+"---\n"+
				policyBinding("b", "p", "Deny", checkedOnly, "  paramRef: {name: nothere, namespace: params, parameterNotFoundAction: Deny}\n"),
				vapCreated+bindingCreated)
			msg := policyDenied("none", "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction")
			e.wantRefused(t, configMap("default", "none", 0, map[string]string{"check": "params"}), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, msg)
			path := k.writeFile(t, "none.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: none\n  namespace: default\n  labels: {check: params}\n", 0o600)
			e.kubectl(t, 1, "", `The configmaps "none" is invalid: : ValidatingAdmissionPolicy 'p' with binding 'b' denied request: failed to configure binding: no params found for policy binding with `+"`Deny`"+` parameterNotFoundAction`+"\n", "apply", "-f", path)
			e.apply(t, "params.yaml", paramsPolicy("ConfigMap", "int(params.data.limit)", "params.data.limit")+"---\n"+
				policyBinding("b", "p", "Deny", checkedOnly, "  paramRef: {name: nothere, namespace: params, parameterNotFoundAction: Allow}\n"),
				"validatingadmissionpolicy.admissionregistration.k8s.io/p unchanged\nvalidatingadmissionpolicybinding.admissionregistration.k8s.io/b configured\n")
			e.wantAdmitted(t, configMap("default", "none", 0, map[string]string{"check": "params"}))
		}},
		{"params from a custom resource", func(t *testing.T) {
			k.run(t, "apply", "-f", k.writeFile(t, "limit.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: limit, namespace: params}\nspec: {size: 1}\n", 0o600))
			e.applyDeleted(t, "params.yaml", paramsPolicy("Widget", "params.spec.size", "string(params.spec.size)")+"---\n"+
				policyBinding("b", "p", "Deny", checkedOnly, "  paramRef: {name: limit, namespace: params, parameterNotFoundAction: Deny}\n"),
				vapCreated+bindingCreated)
			checked := map[string]string{"check": "params"}
			e.wantRefused(t, configMap("default", "cr-two", 2, checked), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, policyDenied("cr-two", "at most 1 keys"))
			k.run(t, "-n", "params", "patch", "widget", "limit", "--type=merge", "-p", `{"spec":{"size":2}}`)
			e.wantAdmitted(t, configMap("default", "cr-two", 2, checked))
		}},
		{"namespaceObject", func(t *testing.T) {
			k.run(t, "create", "namespace", "prod")
			k.run(t, "label", "namespace", "prod", "env=prod")
			k.run(t, "create", "namespace", "dev")
			k.run(t, "label", "namespace", "dev", "env=dev")
			e.applyDeleted(t, "nsobject.yaml", configMapPolicy("p", `  validations:
  - expression: "'env' in namespaceObject.metadata.labels && namespaceObject.metadata.labels['env'] == 'prod'"
    message: only in prod namespaces
`)+"---\n"+policyBinding("b", "p", "Deny", "    namespaceSelector:\n      matchExpressions: [{key: env, operator: Exists}]\n    objectSelector: {}\n", ""),
				vapCreated+bindingCreated)
			e.wantRefused(t, configMap("dev", "app", 1, nil), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, policyDenied("app", "only in prod namespaces"))
			e.wantAdmitted(t, configMap("prod", "app", 1, nil))
		}},
		{"authorizer", func(t *testing.T) {
			k.run(t, "create", "namespace", "authz")
			k.run(t, "label", "namespace", "authz", "authz=yes")
			k.run(t, "-n", "authz", "create", "role", "cm-writer", "--verb=create,get", "--resource=configmaps")
			k.run(t, "-n", "authz", "create", "rolebinding", "someone-cm", "--role=cm-writer", "--user=someone")
			e.applyDeleted(t, "authz.yaml", configMapPolicy("p", `  validations:
  - expression: "authorizer.group('').resource('secrets').namespace(object.metadata.namespace).check('list').allowed()"
    message: the requester may not list secrets here
`)+"---\n"+policyBinding("b", "p", "Deny", "    namespaceSelector: {matchLabels: {authz: \"yes\"}}\n    objectSelector: {}\n", ""),
				vapCreated+bindingCreated)
			e.kubectl(t, 0, "configmap/by-admin created\n", "", "-n", "authz", "create", "configmap", "by-admin", "--from-literal=k=v")
			as := []string{"--as=someone", "--as-group=system:authenticated", "-n", "authz"}
			e.kubectl(t, 1, "", `error: failed to create configmap: configmaps "by-someone" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: the requester may not list secrets here`+"\n",
				append(as, "create", "configmap", "by-someone", "--from-literal=k=v")...)
			if _, err := e.client.CoreV1().ConfigMaps("authz").Get(e.ctx, "by-someone", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("GET of the refused ConfigMap by-someone: %v; want NotFound", err)
			}
			// Granted, the very next write is admitted.
			k.run(t, "-n", "authz", "create", "role", "secret-lister", "--verb=list", "--resource=secrets")
			k.run(t, "-n", "authz", "create", "rolebinding", "someone-secrets", "--role=secret-lister", "--user=someone")
			e.kubectl(t, 0, "configmap/by-someone created\n", "", append(as, "create", "configmap", "by-someone", "--from-literal=k=v")...)
			if got := k.configMap(t, "authz", "by-someone"); got.Data["k"] != "v" {
				t.Errorf("ConfigMap by-someone: data %v; want k=v", got.Data)
			}
		}},
		{"every write path", func(t *testing.T) {
			k.run(t, "create", "namespace", "paths")
			e.applyDeleted(t, "paths.yaml", `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: p}
spec:
  failurePolicy: Fail
  matchConstraints:
`+policyFields+`    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["*"], resources: ["configmaps"], scope: "*"}
  validations:
  - expression: "request.operation != 'DELETE' || !has(oldObject.metadata.labels) || !('protected' in oldObject.metadata.labels)"
    message: protected
  - expression: "request.operation == 'DELETE' || !has(object.data) || size(object.data) <= 2"
    message: at most two keys
---
`+policyBinding("b", "p", "Deny", "    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: paths}}\n    objectSelector: {}\n", ""), vapCreated+bindingCreated)
			invalid := func(name, message string) string {
				return `The configmaps "` + name + `" is invalid: : ValidatingAdmissionPolicy 'p' with binding 'b' denied request: ` + message + "\n"
			}
			path := k.writeFile(t, "three.yaml", configMapManifest("paths", "three", 3), 0o600)
			e.kubectl(t, 1, "", invalid("three", "at most two keys"), "apply", "--server-side", "-f", path)
			e.kubectl(t, 1, "", invalid("three", "at most two keys"), "create", "--dry-run=server", "-f", path)
			if _, err := e.client.CoreV1().ConfigMaps("paths").Get(e.ctx, "three", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("GET of the refused ConfigMap three: %v; want NotFound", err)
			}
			k.run(t, "-n", "paths", "create", "configmap", "keep", "--from-literal=k1=v")
			k.run(t, "-n", "paths", "label", "configmap", "keep", "protected=yes")
			k.run(t, "-n", "paths", "create", "configmap", "gone", "--from-literal=k1=v")
			e.kubectl(t, 1, "", invalid("keep", "at most two keys"), "-n", "paths", "patch", "configmap", "keep", "-p", `{"data":{"k2":"v","k3":"v"}}`)
			e.kubectl(t, 1, "", invalid("keep", "at most two keys"), "-n", "paths", "apply", "--server-side", "--force-conflicts", "-f",
				k.writeFile(t, "keep.yaml", configMapManifest("paths", "keep", 3), 0o600))
			e.kubectl(t, 1, "", invalid("keep", "protected"), "-n", "paths", "delete", "configmap", "keep")
			// A delete of the collection is admitted item by item, as kube's,
			// whose attributes carry no name: kube's "Unknown".
			err := e.client.CoreV1().ConfigMaps("paths").DeleteCollection(e.ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
			wantStatus(t, "delete the collection", err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
				`configmaps "Unknown" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: protected`)
			if got := k.configMap(t, "paths", "keep"); !maps.Equal(got.Data, map[string]string{"k1": "v"}) || got.Labels["protected"] != "yes" {
				t.Errorf("ConfigMap keep after the refused writes: data %v, labels %v; want k1 and protected=yes", got.Data, got.Labels)
			}
			if _, err := e.client.CoreV1().ConfigMaps("paths").Get(e.ctx, "gone", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("GET of ConfigMap gone after the collection's delete: %v; want NotFound (deleted before keep was refused)", err)
			}
		}},
		{"mutating", func(t *testing.T) {
			e.applyDeleted(t, "mutating.yaml", mutatingPolicies, "mutatingadmissionpolicy.admissionregistration.k8s.io/add-label created\n"+
				"mutatingadmissionpolicybinding.admissionregistration.k8s.io/add-label created\n"+
				"mutatingadmissionpolicy.admissionregistration.k8s.io/set-size created\n"+
				"mutatingadmissionpolicybinding.admissionregistration.k8s.io/set-size created\n")
			k.run(t, "create", "configmap", "labelled", "--from-literal=k=v")
			if got := k.configMap(t, "default", "labelled"); !maps.Equal(got.Labels, map[string]string{"mutated": "yes"}) || got.Data["k"] != "v" {
				t.Errorf("ConfigMap labelled: labels %v, data %v; want the policy's label mutated=yes and k=v", got.Labels, got.Data)
			}
			// As a webhook's, the policy's change is owned by no manager.
			stored := k.managedConfigMap(t, "labelled")
			if len(stored.ManagedFields) != 1 || stored.ManagedFields[0].Manager != "kubectl-create" {
				t.Errorf("ConfigMap labelled: managedFields %s; want one entry, kubectl-create's", describeManaged(stored.ManagedFields))
			}
			for _, mf := range stored.ManagedFields {
				if keys := fieldKeys(fieldsOf(t, &mf), "f:metadata", "f:labels"); keys != nil {
					t.Errorf("ConfigMap labelled: %s owns labels %q; want none (the policy's label is nobody's)", mf.Manager, keys)
				}
			}
			path := k.writeFile(t, "own-label.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: own-label\n  namespace: default\n  labels: {app: x}\n", 0o600)
			k.run(t, "apply", "-f", path)
			if got := k.configMap(t, "default", "own-label"); !maps.Equal(got.Labels, map[string]string{"app": "x", "mutated": "yes"}) {
				t.Errorf("ConfigMap own-label: labels %v; want app=x and mutated=yes", got.Labels)
			}
			k.run(t, "apply", "-f", k.writeFile(t, "w.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: default}\nspec: {size: 1, color: blue}\n", 0o600))
			if out := k.run(t, "get", "widget", "w", "-o", "jsonpath={.spec.size} {.spec.color}"); out != "7 blue" {
				t.Errorf("Widget w: spec.size and color %q; want %q (the JSONPatch's size)", out, "7 blue")
			}
			// An ApplyConfiguration on a custom resource merges by the CRD's
			// schema.
			e.applyDeleted(t, "paint.yaml", `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: paint}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
`+policyFields+`    resourceRules:
    - {apiGroups: [example.com], apiVersions: ["v1"], operations: ["CREATE"], resources: ["widgets"], scope: "*"}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{spec: Object.spec{color: "red"}, metadata: Object.metadata{labels: {"painted": "yes"}}}'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: paint}
spec:
  policyName: paint
  matchResources:
`+policyFields, "mutatingadmissionpolicy.admissionregistration.k8s.io/paint created\nmutatingadmissionpolicybinding.admissionregistration.k8s.io/paint created\n")
			k.run(t, "apply", "-f", k.writeFile(t, "w2.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w2, namespace: default, labels: {app: x}}\nspec: {size: 1, color: blue}\n", 0o600))
			if out := k.run(t, "get", "widget", "w2", "-o", "jsonpath={.spec.size} {.spec.color} {.metadata.labels}"); out != `7 red {"app":"x","painted":"yes"}` {
				t.Errorf("Widget w2: %q; want %q (both policies' changes, the labels merged)", out, `7 red {"app":"x","painted":"yes"}`)
			}
		}},
		{"after a restart", func(t *testing.T) {
			// The first write the restarted binary takes sees the policies.
			e.applyDeleted(t, "kept.yaml", maxKeysPolicy+"---\n"+policyBinding("b", "p", "Deny", "", ""), vapCreated+bindingCreated)
			k.srv.stopCleanly(t)
			k.srv = startConcord(top, "concord (RBAC, restarted)", top.TempDir(), e.args...)
			e.client = kubeconfigClient(t, k.srv.kubeconfig)
			e.wantRefused(t, configMap("default", "after-restart", 3, nil), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, policyDenied("after-restart", "at most two keys"))
		}},
	} {
		if !t.Run(step.name, step.run) {
			break
		}
	}
	e.k.srv.stopCleanly(t)
}

// checkedOnly matches the ConfigMaps labelled check=params (not the
// params themselves).
const checkedOnly = "    namespaceSelector: {}\n    objectSelector: {matchLabels: {check: params}}\n"

// paramsPolicy is policy p with params of kind (ConfigMap, or the Widgets
// of example.com): at most limit keys, said with limitString.
func paramsPolicy(kind, limit, limitString string) string {
	apiVersion := "v1"
	if kind == "Widget" {
		apiVersion = "example.com/v1"
	}
	return configMapPolicy("p", `  paramKind: {apiVersion: `+apiVersion+`, kind: `+kind+`}
  validations:
  - expression: "size(object.data) <= `+limit+`"
    messageExpression: "'at most ' + `+limitString+` + ' keys'"
`)
}

// mutatingPolicies add the label mutated=yes to every ConfigMap created
// (ApplyConfiguration; not reinvoked) and set every Widget's spec.size to
// 7 (JSONPatch; reinvoked if a later mutation changed the object).
const mutatingPolicies = `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: add-label}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
` + policyFields + `    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"], scope: "*"}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"mutated": "yes"}}}'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: add-label}
spec:
  policyName: add-label
  matchResources:
` + policyFields + `---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: set-size}
spec:
  failurePolicy: Fail
  reinvocationPolicy: IfNeeded
  matchConstraints:
` + policyFields + `    resourceRules:
    - {apiGroups: [example.com], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["widgets"], scope: "*"}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "add", path: "/spec/size", value: 7}]'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: set-size}
spec:
  policyName: set-size
  matchResources:
` + policyFields

// TestAdmissionPoliciesAcrossReplicas: a policy and binding made through
// replica A count on replica B from the moment their create returned, and
// a deleted binding stops counting as soon: kubectl apply through A, and a
// violating write through B the moment kubectl printed the binding's
// line, is refused every time; then, with client-go (a tighter race), a
// binding created through A refuses the next write through B and, deleted
// through A, admits the one after.
func TestAdmissionPoliciesAcrossReplicas(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	const kubectlRounds, clientRounds = 20, 300
	tmp := t.TempDir()
	certDir := filepath.Join(tmp, "tls") // one CA for both replicas
	etcd := etcdtest.Start(t).Endpoint
	var kubeconfigs [2]string
	for i, name := range []string{"replica A", "replica B"} {
		dir := t.TempDir()
		kubeconfigs[i] = filepath.Join(dir, "admin.kubeconfig")
		args := append(append([]string{}, rbacFlags...), "--etcd-servers", etcd, "--cert-dir", certDir, "--write-kubeconfig", kubeconfigs[i])
		startConcord(t, name, dir, args...)
	}
	a, b := kubeconfigClient(t, kubeconfigs[0]), kubeconfigClient(t, kubeconfigs[1])
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	marked := func(name, key string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Data: map[string]string{key: "x"}}
	}
	refusedByB := func(what string, cm *corev1.ConfigMap, policy, binding, message string) {
		t.Helper()
		_, err := b.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
		wantStatus(t, what+": create through B", err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			fmt.Sprintf(`configmaps "%s" is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s`, cm.Name, policy, binding, message))
		if _, err := b.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: GET of the refused ConfigMap through B: %v; want NotFound", what, err)
		}
	}

	for i := range kubectlRounds {
		p, bnd := fmt.Sprintf("p%02d", i), fmt.Sprintf("b%02d", i)
		path := filepath.Join(tmp, p+".yaml")
		writeFile(t, path, configMapPolicy(p, fmt.Sprintf(`  validations:
  - expression: "!has(object.data) || !('round-%02d' in object.data)"
    message: round %02d
`, i, i))+"---\n"+policyBinding(bnd, p, "Deny", "", ""))
		bindingLine := "validatingadmissionpolicybinding.admissionregistration.k8s.io/" + bnd + " created"
		out := kubectlOnLine(t, ctx, kubeconfigs[0], filepath.Join(tmp, "cache-a"), bindingLine, func() {
			refusedByB(fmt.Sprintf("round %d", i), marked(fmt.Sprintf("cm-%02d", i), fmt.Sprintf("round-%02d", i)), p, bnd, fmt.Sprintf("round %02d", i))
		}, "apply", "-f", path)
		if want := "validatingadmissionpolicy.admissionregistration.k8s.io/" + p + " created\n" + bindingLine + "\n"; out != want {
			t.Fatalf("round %d: kubectl apply through A printed %q; want %q", i, out, want)
		}
	}

	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := yaml.Unmarshal([]byte(configMapPolicy("deny-marked", `  validations:
  - expression: "!has(object.data) || !('deny' in object.data)"
    message: marked
`)), policy); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := yaml.Unmarshal([]byte(policyBinding("deny-marked", "deny-marked", "Deny", "", "")), binding); err != nil {
		t.Fatal(err)
	}
	bindings := a.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	for i := range clientRounds {
		if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatalf("round %d: create the binding through A: %v", i, err)
		}
		refusedByB(fmt.Sprintf("client round %d", i), marked(fmt.Sprintf("refused-%03d", i), "deny"), "deny-marked", "deny-marked", "marked")
		if err := bindings.Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("round %d: delete the binding through A: %v", i, err)
		}
		if _, err := b.CoreV1().ConfigMaps("default").Create(ctx, marked(fmt.Sprintf("admitted-%03d", i), "deny"), metav1.CreateOptions{}); err != nil {
			t.Errorf("client round %d: create through B right after the binding's delete through A: %v; want it admitted", i, err)
		}
	}
}

// kubectlOnLine runs kubectl, calls do as soon as it printed line (before
// it exits), and returns its stdout; kubectl must exit 0 and print line.
func kubectlOnLine(t *testing.T, ctx context.Context, kubeconfig, cacheDir, line string, do func(), args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlPath, append([]string{"--kubeconfig", kubeconfig, "--cache-dir", cacheDir, "--request-timeout", "20s"}, args...)...)
	var errOut strings.Builder
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	seen := false
	for sc := bufio.NewScanner(stdout); sc.Scan(); {
		out.WriteString(sc.Text() + "\n")
		if sc.Text() == line && !seen {
			seen = true
			do()
		}
	}
	if err := cmd.Wait(); err != nil || !seen {
		t.Fatalf("kubectl %s: %v; printed %q (want the line %q), stderr %q", strings.Join(args, " "), err, out.String(), line, errOut.String())
	}
	return out.String()
}
