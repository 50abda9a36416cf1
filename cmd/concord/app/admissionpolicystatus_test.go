package app

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/internal/syncbuf"
)

// TestAdmissionPolicyStatusRuns: with the controller asked for, it runs
// under its own Lease and a policy created over HTTP gets its type
// checking in its status.
func TestAdmissionPolicyStatusRuns(t *testing.T) {
	e := etcdtest.Start(t)
	srv := newTestServer(t, e, &syncbuf.Buffer{}, WithControllers(Controllers{AdmissionPolicyStatus: true}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("Run ended before it was ready: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("not ready after a minute")
	}

	const policy = `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicy","metadata":{"name":"cm"},
"spec":{"failurePolicy":"Fail","matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"]}]},
"validations":[{"expression":"object.foo == 'x'"}]}}`
	const path = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+path, strings.NewReader(policy))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST the policy: %d; want 201", resp.StatusCode)
	}

	const want = `{"observedGeneration":1,"typeChecking":{"expressionWarnings":[{"fieldRef":"spec.validations[0].expression","warning":"/v1, Kind=ConfigMap: ERROR: \u003cinput\u003e:1:7: undefined field 'foo'\n | object.foo == 'x'\n | ......^\n"}]}}`
	var got string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, body := get(t, srv.URL()+path+"/cm")
		if code != http.StatusOK {
			t.Fatalf("GET the policy: %d %s", code, body)
		}
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(p.Status)
		if err != nil {
			t.Fatal(err)
		}
		if got = string(b); got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %s; want %s", got, want)
		}
	}
	if h, _ := leaseHolder(t, e, "concord-admissionpolicy-status"); h == "" {
		t.Error("the Lease concord-admissionpolicy-status is not held")
	}
}
