package apiserver_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestDryRunWritesNothing(t *testing.T) {
	s := startServer(t)
	existing := s.create(t, "default", "flags", nil)
	before := s.storedKeys(t, "/registry/")

	resp := s.do(t, http.MethodPost, nsPath+"?dryRun=All", configMap("dry", "", map[string]string{"k": "v"}))
	var dry corev1.ConfigMap
	resp.decode(t, &dry)
	if resp.Code != http.StatusCreated || dry.UID == "" || dry.CreationTimestamp.IsZero() || dry.ResourceVersion != "" {
		t.Errorf("dry-run create: %d uid %q rv %q; want 201 with uid and creationTimestamp, no resourceVersion", resp.Code, dry.UID, dry.ResourceVersion)
	}
	if resp := s.do(t, http.MethodPost, nsPath+"?dryRun=All", configMap("flags", "", nil)); resp.Code != http.StatusConflict {
		t.Errorf("dry-run create of an existing name: %d; want 409", resp.Code)
	}
	if resp := s.do(t, http.MethodPost, nsPath+"?dryRun=All", configMap("Bad_Name", "", nil)); resp.Code != http.StatusUnprocessableEntity {
		t.Errorf("dry-run create of an invalid name: %d; want 422", resp.Code)
	}
	existing.Data = map[string]string{"k": "changed"}
	if resp := s.do(t, http.MethodPut, flagsPath+"?dryRun=All", &existing); resp.Code != http.StatusOK {
		t.Errorf("dry-run update: %d %s", resp.Code, resp.Body)
	}
	if resp, _ := s.patch(t, "flags?dryRun=All", "application/merge-patch+json", `{"data":{"k":"patched"}}`); resp.Code != http.StatusOK {
		t.Errorf("dry-run patch: %d %s", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodDelete, flagsPath+"?dryRun=All", nil); resp.Code != http.StatusOK {
		t.Errorf("dry-run delete: %d %s", resp.Code, resp.Body)
	}
	if resp := s.do(t, http.MethodDelete, "/api/v1/namespaces/kube-node-lease?dryRun=All", nil); resp.Code != http.StatusOK {
		t.Errorf("dry-run delete of a namespace: %d %s", resp.Code, resp.Body)
	}
	if after := s.storedKeys(t, "/registry/"); len(after) != len(before) || after[flagsKey] != before[flagsKey] {
		t.Errorf("dry runs changed the store")
	}
}

func TestGenerateName(t *testing.T) {
	s := startServer(t)
	seen := map[string]bool{}
	for range 5 {
		resp := s.do(t, http.MethodPost, nsPath, `{"metadata":{"generateName":"job-"}}`)
		var cm corev1.ConfigMap
		resp.decode(t, &cm)
		if resp.Code != http.StatusCreated || !strings.HasPrefix(cm.Name, "job-") || len(cm.Name) != len("job-")+5 || seen[cm.Name] {
			t.Fatalf("generateName: %d name %q; want a new job-xxxxx", resp.Code, cm.Name)
		}
		seen[cm.Name] = true
	}
}

func TestFieldValidationWarns(t *testing.T) {
	s := startServer(t)
	resp := s.do(t, http.MethodPost, nsPath, `{"metadata":{"name":"warned"},"spec":{"x":1}}`)
	if resp.Code != http.StatusCreated || resp.Header.Get("Warning") != `299 - "unknown field \"spec\""` {
		t.Errorf("unknown field by default: %d Warning %q; want 201 and a warning", resp.Code, resp.Header.Get("Warning"))
	}
	resp = s.do(t, http.MethodPost, nsPath+"?fieldValidation=Ignore", `{"metadata":{"name":"ignored"},"spec":{"x":1}}`)
	if resp.Code != http.StatusCreated || resp.Header.Get("Warning") != "" {
		t.Errorf("fieldValidation=Ignore: %d Warning %q; want 201 and no warning", resp.Code, resp.Header.Get("Warning"))
	}
}

func TestFinalizersHoldDeletion(t *testing.T) {
	s := startServer(t)
	resp := s.do(t, http.MethodPost, nsPath, `{"metadata":{"name":"flags","finalizers":["example.com/cleanup"]}}`)
	if resp.Code != http.StatusCreated {
		t.Fatalf("create: %d", resp.Code)
	}
	resp = s.do(t, http.MethodDelete, flagsPath, nil)
	var marked corev1.ConfigMap
	resp.decode(t, &marked)
	if resp.Code != http.StatusOK || marked.DeletionTimestamp == nil || marked.DeletionGracePeriodSeconds == nil || *marked.DeletionGracePeriodSeconds != 0 {
		t.Fatalf("DELETE with a finalizer: %d %+v; want the object marked with deletionTimestamp", resp.Code, marked.ObjectMeta)
	}
	if stored, _ := s.storedConfigMap(t, flagsKey); stored == nil || stored.DeletionTimestamp == nil {
		t.Fatal("the object must stay stored, marked, while a finalizer holds it")
	}
	adding := marked.DeepCopy()
	adding.Finalizers = append(adding.Finalizers, "example.com/more")
	if resp := s.do(t, http.MethodPut, flagsPath, adding); resp.Code != http.StatusUnprocessableEntity {
		t.Errorf("adding a finalizer while deleting: %d; want 422", resp.Code)
	}
	if resp := s.do(t, http.MethodPost, nsPath, configMap("flags", "", nil)); resp.Code != http.StatusConflict {
		t.Errorf("creating the name while it is being deleted: %d; want 409", resp.Code)
	}
	resp, _ = s.patch(t, "flags", "application/merge-patch+json", `{"metadata":{"finalizers":null}}`)
	if resp.Code != http.StatusOK {
		t.Fatalf("removing the last finalizer: %d %s", resp.Code, resp.Body)
	}
	if stored, _ := s.storedConfigMap(t, flagsKey); stored != nil {
		t.Errorf("the object is still stored after its last finalizer was removed")
	}
}

func TestDeleteCollection(t *testing.T) {
	s := startServer(t)
	s.create(t, "default", "a", map[string]string{"app": "x"})
	s.create(t, "default", "b", map[string]string{"app": "x"})
	s.create(t, "default", "c", map[string]string{"app": "y"})
	resp := s.do(t, http.MethodDelete, nsPath+"?labelSelector=app%3Dx", nil)
	var deleted corev1.ConfigMapList
	resp.decode(t, &deleted)
	if resp.Code != http.StatusOK || len(deleted.Items) != 2 {
		t.Fatalf("deletecollection app=x: %d, %d items; want 200 with the 2 deleted", resp.Code, len(deleted.Items))
	}
	_, rest := s.list(t, nsPath, nil)
	if names(rest)[0] != "default/c" || len(rest.Items) != 1 {
		t.Errorf("left after deletecollection: %v; want only c", names(rest))
	}
	if resp := s.do(t, http.MethodDelete, nsPath+"?dryRun=All", nil); resp.Code != http.StatusOK {
		t.Errorf("dry-run deletecollection: %d", resp.Code)
	}
	if _, rest := s.list(t, nsPath, nil); len(rest.Items) != 1 {
		t.Errorf("dry-run deletecollection deleted %v", names(rest))
	}
}

// TestDryRunIsDecidedOnEtcdsState: a dry run confirms nothing by writing,
// so it must not answer from the state this replica remembers. Here the
// object changes behind the replica's back (another replica, no watch),
// and a dry-run PUT from the old version must be 409, like a real one.
func TestDryRunIsDecidedOnEtcdsState(t *testing.T) {
	s := startServer(t)
	c := s.create(t, "default", "flags", nil) // remembered by the create
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	changed := `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"flags","namespace":"default","uid":"` + string(c.UID) + `","creationTimestamp":"2026-01-01T00:00:00Z"},"data":{"by":"elsewhere"}}`
	if _, err := s.Etcd.Client.Put(ctx, flagsKey, changed); err != nil {
		t.Fatal(err)
	}
	c.Data = map[string]string{"by": "me"}
	for _, path := range []string{flagsPath + "?dryRun=All", flagsPath} {
		if resp := s.do(t, http.MethodPut, path, &c); resp.Code != http.StatusConflict {
			t.Errorf("PUT %s from the superseded version: %d; want 409", path, resp.Code)
		}
	}
	if resp := s.do(t, http.MethodDelete, flagsPath+"?dryRun=All", `{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"resourceVersion":"`+c.ResourceVersion+`"}}`); resp.Code != http.StatusConflict {
		t.Errorf("dry-run DELETE with the superseded resourceVersion: %d; want 409", resp.Code)
	}
}
