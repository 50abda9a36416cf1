package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// documentedWidgetsCRDManifest is widgetsCRDManifest with descriptions,
// which kubectl explain prints, and an enum.
const documentedWidgetsCRDManifest = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        description: A Widget is a thing of some size and color.
        properties:
          spec:
            type: object
            description: The desired state of the widget.
            x-kubernetes-validations:
            - {rule: "self.size <= 10", message: "size must be at most 10"}
            properties:
              size: {type: integer, default: 1, description: How big the widget is.}
              color: {type: string, enum: [red, blue], description: The color of the widget.}
          status:
            type: object
            description: What the widget is.
            properties:
              ready: {type: boolean, description: Whether the widget is ready.}
`

// explainWidgetsSpec is what kubectl explain widgets.spec prints, from the
// OpenAPI v3 document of example.com/v1 (kubectl 1.32 and 1.37 alike).
const explainWidgetsSpec = `GROUP:      example.com
KIND:       Widget
VERSION:    v1

FIELD: spec <Object>


DESCRIPTION:
    The desired state of the widget.
    
FIELDS:
  color	<string>
  enum: red, blue
    The color of the widget.

  size	<integer>
    How big the widget is.


`

// openAPIKubectl is the kubectl TestKubectlExplainCustomResources drives:
// kubectlPath, or the one $CONCORD_E2E_KUBECTL names, to run the same
// steps with another release (one built from k8s.io/kubectl's module, say).
func openAPIKubectl(t *testing.T) string {
	t.Helper()
	bin := kubectlPath
	if env := os.Getenv("CONCORD_E2E_KUBECTL"); env != "" {
		bin = env
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	return bin
}

// kubectlAt runs bin against srv with the session's cache, for at most
// 30 s, as the kubectl helper does.
func kubectlAt(t *testing.T, bin string, k *kubectlSession, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", k.srv.kubeconfig, "--cache-dir", k.cacheDir, "--request-timeout", "20s"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// TestKubectlExplainCustomResources: with a CRD applied, the real kubectl
// explains its kind and fields from the OpenAPI v3 document of its group
// version (and from /openapi/v2 with --output=plaintext-openapiv2), finds
// there that the server validates fields (a PATCH with fieldValidation for
// the kind), so its default --validate=strict sends fieldValidation=Strict
// and the server refuses an unknown field, as with kube-apiserver; a
// schema change is explained at once (the document's hash in /openapi/v3
// changed, so kubectl's cache does not serve the old one); once the CRD is
// deleted, the documents no longer have it.
func TestKubectlExplainCustomResources(t *testing.T) {
	t.Parallel()
	bin := openAPIKubectl(t)
	tmp := t.TempDir()
	srv := startConcord(t, "concord", t.TempDir(), "--data-dir", filepath.Join(tmp, "data"))
	k := &kubectlSession{srv: srv, cacheDir: filepath.Join(tmp, "kubectl-cache"), tmp: tmp}
	run := func(t *testing.T, args ...string) string {
		t.Helper()
		out, errOut, err := kubectlAt(t, bin, k, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}
	fail := func(t *testing.T, args ...string) (stdout, stderr string) {
		t.Helper()
		out, errOut, err := kubectlAt(t, bin, k, args...)
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("kubectl %s: %v; want it to exit non-zero\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
		}
		return out, errOut
	}
	step := func(name string, f func(t *testing.T)) bool {
		ok := t.Run(name, f)
		if !ok {
			t.Logf("step %s failed", name)
		}
		return ok
	}

	crd := k.writeFile(t, "crd.yaml", documentedWidgetsCRDManifest, 0o644)
	if !step("1-apply-crd", func(t *testing.T) {
		if out := run(t, "apply", "-f", crd); out != "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created\n" {
			t.Errorf("kubectl apply of the CRD printed %q", out)
		}
		run(t, "wait", "--for", "condition=established", "--timeout", "20s", "crd/widgets.example.com")
		// Established, and served by this replica's catalog: discovery
		// lists widgets.
		k.waitServed(t, "/apis/example.com/v1/namespaces/default/widgets")
	}) {
		return
	}

	if !step("2-explain", func(t *testing.T) {
		out := run(t, "explain", "widgets")
		for _, want := range []string{
			"GROUP:      example.com\nKIND:       Widget\nVERSION:    v1\n",
			"DESCRIPTION:\n    A Widget is a thing of some size and color.\n",
			"  metadata\t<ObjectMeta>\n    Standard object's metadata.",
			"  spec\t<Object>\n    The desired state of the widget.\n",
			"  status\t<Object>\n    What the widget is.\n",
			"  apiVersion\t<string>\n    APIVersion defines the versioned schema",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl explain widgets lacks %q:\n%s", want, out)
			}
		}
		if out := run(t, "explain", "widgets.spec"); out != explainWidgetsSpec {
			t.Errorf("kubectl explain widgets.spec printed\n%s\nwant\n%s", out, explainWidgetsSpec)
		}
		if out := run(t, "explain", "wd.spec.size"); !strings.Contains(out, "FIELD: size <integer>") || !strings.Contains(out, "How big the widget is.") {
			t.Errorf("kubectl explain wd.spec.size (by short name):\n%s", out)
		}
		if out := run(t, "explain", "widgets.status.ready", "--api-version=example.com/v1"); !strings.Contains(out, "FIELD: ready <boolean>") || !strings.Contains(out, "Whether the widget is ready.") {
			t.Errorf("kubectl explain widgets.status.ready --api-version=example.com/v1:\n%s", out)
		}
		if out := run(t, "explain", "widgets", "--recursive"); !strings.Contains(out, "  spec\t<Object>\n    color\t<string>\n    enum: red, blue\n    size\t<integer>\n  status\t<Object>\n    ready\t<boolean>\n") {
			t.Errorf("kubectl explain widgets --recursive:\n%s", out)
		}
		// From /openapi/v2, kubectl's other template.
		out = run(t, "explain", "widgets.spec", "--output=plaintext-openapiv2")
		for _, want := range []string{"KIND:     Widget\nVERSION:  example.com/v1\n", "RESOURCE: spec <Object>", "   color\t<string>\n     The color of the widget.\n", "   size\t<integer>\n     How big the widget is.\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl explain widgets.spec --output=plaintext-openapiv2 lacks %q:\n%s", want, out)
			}
		}
		if _, errOut := fail(t, "explain", "widgets.spec.nothing"); !strings.Contains(errOut, `field "nothing" does not exist`) {
			t.Errorf("kubectl explain widgets.spec.nothing: %s", errOut)
		}
	}) {
		return
	}

	step("3-validate", func(t *testing.T) {
		w1 := k.writeFile(t, "w1.yaml", widgetManifest, 0o644)
		if out := run(t, "apply", "-f", w1); out != "widget.example.com/w1 created\n" {
			t.Errorf("kubectl apply of w1 printed %q", out)
		}
		k.writeFile(t, "w1.yaml", strings.Replace(widgetManifest, "blue", "red", 1), 0o644)
		out, errOut, err := kubectlAt(t, bin, k, "apply", "-f", w1, "-v=6")
		if err != nil || out != "widget.example.com/w1 configured\n" {
			t.Fatalf("kubectl apply of a changed w1: %v\nstdout: %s\nstderr: %s", err, out, errOut)
		}
		// kubectl read the kind's document and found fieldValidation there.
		for _, want := range []string{"/openapi/v3/apis/example.com/v1?hash=", "/apis/example.com/v1/namespaces/default/widgets/w1?fieldManager=kubectl-client-side-apply&fieldValidation=Strict"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("kubectl apply -v=6 did not request %s:\n%s", want, errOut)
			}
		}
		// An unknown field: kubectl's default --validate=strict, and
		// create --validate=true, leave it to the server, which refuses it.
		extra := k.writeFile(t, "w2.yaml", widgetExtraManifest, 0o644)
		const refused = `Error from server (BadRequest): error when creating "` + "%s" + `": Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.extra"`
		for _, args := range [][]string{{"apply", "-f", extra}, {"apply", "--validate=strict", "-f", extra}, {"create", "--validate=true", "-f", extra, "-v=6"}} {
			_, errOut := fail(t, args...)
			if want := strings.Replace(refused, "%s", extra, 1); !strings.Contains(errOut, want) {
				t.Errorf("kubectl %s: %s\nwant %s", strings.Join(args, " "), errOut, want)
			}
			if args[0] == "create" && !strings.Contains(errOut, "/apis/example.com/v1/namespaces/default/widgets?fieldManager=kubectl-create&fieldValidation=Strict") {
				t.Errorf("kubectl create --validate=true -v=6 did not POST with fieldValidation=Strict:\n%s", errOut)
			}
		}
		if code, body := k.httpCode(t, "/apis/example.com/v1/namespaces/default/widgets/w2"); code != http.StatusNotFound {
			t.Errorf("w2 after the refused writes: %d %s; want 404", code, body)
		}
	})

	step("4-change-schema", func(t *testing.T) {
		changed := strings.Replace(documentedWidgetsCRDManifest,
			"              color: {type: string, enum: [red, blue], description: The color of the widget.}\n",
			"              color: {type: string, enum: [red, blue], description: The color of the widget.}\n              shape: {type: string, description: The shape of the widget.}\n", 1)
		if out := run(t, "apply", "-f", k.writeFile(t, "crd.yaml", changed, 0o644)); out != "customresourcedefinition.apiextensions.k8s.io/widgets.example.com configured\n" {
			t.Errorf("kubectl apply of the changed CRD printed %q", out)
		}
		// This replica serves the change within moments; kubectl asks
		// the index each time, so it reads the new document at once.
		deadline := time.Now().Add(kubectlPollWait)
		for {
			out, errOut, err := kubectlAt(t, bin, k, "explain", "widgets.spec.shape")
			if err == nil && strings.Contains(out, "FIELD: shape <string>") && strings.Contains(out, "The shape of the widget.") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kubectl explain widgets.spec.shape %s after the change: %v\nstdout: %s\nstderr: %s", kubectlPollWait, err, out, errOut)
			}
			time.Sleep(kubectlPoll)
		}
	})

	step("5-delete-crd", func(t *testing.T) {
		run(t, "delete", "crd", "widgets.example.com")
		k.waitGone(t, "the widgets", "/apis/example.com/v1/namespaces/default/widgets")
		// The resource is gone at once; its OpenAPI follows as the
		// replica applies the deletion, as kube-apiserver's controller.
		var problems []string
		for deadline := time.Now().Add(kubectlPollWait); ; time.Sleep(kubectlPoll) {
			problems = problems[:0]
			code, body := k.httpCode(t, "/openapi/v3")
			var index struct {
				Paths map[string]json.RawMessage `json:"paths"`
			}
			if code != http.StatusOK || json.Unmarshal(body, &index) != nil {
				t.Fatalf("GET /openapi/v3: %d %s", code, body)
			}
			if _, ok := index.Paths["apis/example.com/v1"]; ok || index.Paths["api/v1"] == nil {
				problems = append(problems, fmt.Sprintf("/openapi/v3 lists %s; want api/v1 and no apis/example.com/v1", body))
			}
			if code, _ := k.httpCode(t, "/openapi/v3/apis/example.com/v1"); code != http.StatusNotFound {
				problems = append(problems, fmt.Sprintf("GET /openapi/v3/apis/example.com/v1: %d; want 404", code))
			}
			code, body = k.httpCode(t, "/openapi/v2")
			if code != http.StatusOK || bytes.Contains(body, []byte("com.example.v1.Widget")) || bytes.Contains(body, []byte("/apis/example.com/")) || !bytes.Contains(body, []byte("io.k8s.api.core.v1.ConfigMap")) {
				problems = append(problems, fmt.Sprintf("/openapi/v2: %d, still has Widget %v", code, bytes.Contains(body, []byte("com.example.v1.Widget"))))
			}
			if len(problems) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s after the CRD's deletion:\n%s", kubectlPollWait, strings.Join(problems, "\n"))
			}
		}
		if _, errOut := fail(t, "explain", "widgets"); !strings.Contains(errOut, "widgets") {
			t.Errorf("kubectl explain widgets after the CRD's deletion: %s", errOut)
		}
	})
}

// waitServed polls a GET of path until the server answers 200, for at most
// kubectlPollWait.
func (k *kubectlSession) waitServed(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(kubectlPollWait)
	for {
		code, body := k.httpCode(t, path)
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s answers %d after %s; want 200; body: %s", path, code, kubectlPollWait, body)
		}
		time.Sleep(kubectlPoll)
	}
}
