package apiserver_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/internal/syncbuf"
	"github.com/concord-dev/concord/registry"
)

// unconditionalCase is one object replaced without a version: created
// with create, then PUT with update, which changes what changed reads.
type unconditionalCase struct {
	name               string
	collection, item   string
	key                string
	resource           string // the metric's resource label
	create, update     map[string]any
	changed            func(obj map[string]any) string
	before, after      string // what changed reads before and after the PUT
	message            string // the 428's message, without the flag hint
	allowed            map[registry.UnconditionalUpdate]bool
	helmRecordInModeNo bool // under none, the 428 names --unconditional-update=helm-releases
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// dig reads a string at path in a decoded JSON object ("" if absent).
func dig(obj map[string]any, path ...string) string {
	var v any = obj
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

const versionRequiredMsg = ": an update must say which version it replaces: send metadata.resourceVersion from the object you read, or an If-Match header with its ETag"

var unconditionalCases = []unconditionalCase{
	{
		name:       "Helm Secret by type",
		collection: "/api/v1/namespaces/default/secrets", item: "/api/v1/namespaces/default/secrets/sh.helm.release.v1.web.v1",
		key: "/registry/secrets/default/sh.helm.release.v1.web.v1", resource: "secrets",
		create: map[string]any{"metadata": map[string]any{"name": "sh.helm.release.v1.web.v1"}, "type": "helm.sh/release.v1", "data": map[string]any{"release": b64("pending-install")}},
		update: map[string]any{"metadata": map[string]any{"name": "sh.helm.release.v1.web.v1"}, "type": "helm.sh/release.v1", "data": map[string]any{"release": b64("deployed")}},
		changed: func(obj map[string]any) string {
			v, err := base64.StdEncoding.DecodeString(dig(obj, "data", "release"))
			if err != nil {
				return "not base64: " + err.Error()
			}
			return string(v)
		},
		before: "pending-install", after: "deployed",
		message:            `secrets "sh.helm.release.v1.web.v1"` + versionRequiredMsg,
		allowed:            map[registry.UnconditionalUpdate]bool{registry.UnconditionalHelmReleases: true, registry.UnconditionalKube: true},
		helmRecordInModeNo: true,
	},
	{
		name:       "Helm ConfigMap by label",
		collection: nsPath, item: nsPath + "/web.v1",
		key: "/registry/configmaps/default/web.v1", resource: "configmaps",
		create:  map[string]any{"metadata": map[string]any{"name": "web.v1", "labels": map[string]string{"owner": "helm", "name": "web", "status": "pending-install", "version": "1"}}, "data": map[string]string{"release": "r1"}},
		update:  map[string]any{"metadata": map[string]any{"name": "web.v1", "labels": map[string]string{"owner": "helm", "name": "web", "status": "deployed", "version": "1"}}, "data": map[string]string{"release": "r1"}},
		changed: func(obj map[string]any) string { return dig(obj, "metadata", "labels", "status") },
		before:  "pending-install", after: "deployed",
		message:            `configmaps "web.v1"` + versionRequiredMsg,
		allowed:            map[registry.UnconditionalUpdate]bool{registry.UnconditionalHelmReleases: true, registry.UnconditionalKube: true},
		helmRecordInModeNo: true,
	},
	{
		name:       "plain ConfigMap",
		collection: nsPath, item: nsPath + "/app",
		key: "/registry/configmaps/default/app", resource: "configmaps",
		create:  map[string]any{"metadata": map[string]any{"name": "app"}, "data": map[string]string{"mode": "blue"}},
		update:  map[string]any{"metadata": map[string]any{"name": "app"}, "data": map[string]string{"mode": "green"}},
		changed: func(obj map[string]any) string { return dig(obj, "data", "mode") },
		before:  "blue", after: "green",
		message: `configmaps "app"` + versionRequiredMsg,
		allowed: map[registry.UnconditionalUpdate]bool{registry.UnconditionalKube: true},
	},
	{
		name:       "Lease",
		collection: "/apis/coordination.k8s.io/v1/namespaces/default/leases", item: "/apis/coordination.k8s.io/v1/namespaces/default/leases/lock",
		key: "/registry/leases/default/lock", resource: "leases",
		create:  map[string]any{"metadata": map[string]any{"name": "lock", "labels": map[string]string{"owner": "helm"}}, "spec": map[string]any{"holderIdentity": "a"}},
		update:  map[string]any{"metadata": map[string]any{"name": "lock", "labels": map[string]string{"owner": "helm"}}, "spec": map[string]any{"holderIdentity": "b"}},
		changed: func(obj map[string]any) string { return dig(obj, "spec", "holderIdentity") },
		before:  "a", after: "b",
		message: `leases.coordination.k8s.io "lock"` + versionRequiredMsg,
		allowed: map[registry.UnconditionalUpdate]bool{},
	},
	{
		name:       "Event",
		collection: "/api/v1/namespaces/default/events", item: "/api/v1/namespaces/default/events/cm.1",
		key: "/registry/events/default/cm.1", resource: "events",
		create:  map[string]any{"metadata": map[string]any{"name": "cm.1"}, "involvedObject": map[string]any{"kind": "ConfigMap", "namespace": "default", "name": "cm"}, "reason": "R", "message": "before", "type": "Normal"},
		update:  map[string]any{"metadata": map[string]any{"name": "cm.1"}, "involvedObject": map[string]any{"kind": "ConfigMap", "namespace": "default", "name": "cm"}, "reason": "R", "message": "after", "type": "Normal"},
		changed: func(obj map[string]any) string { return dig(obj, "message") },
		before:  "before", after: "after",
		message: `events "cm.1"` + versionRequiredMsg,
		allowed: map[registry.UnconditionalUpdate]bool{registry.UnconditionalKube: true},
	},
	{
		name:       "events.k8s.io Event",
		collection: "/apis/events.k8s.io/v1/namespaces/default/events", item: "/apis/events.k8s.io/v1/namespaces/default/events/cm.2",
		key: "/registry/events/default/cm.2", resource: "events",
		create:  eventsV1Body("a"),
		update:  eventsV1Body("b"),
		changed: func(obj map[string]any) string { return dig(obj, "metadata", "labels", "tier") },
		before:  "a", after: "b",
		message: `events.events.k8s.io "cm.2"` + versionRequiredMsg,
		allowed: map[registry.UnconditionalUpdate]bool{registry.UnconditionalKube: true},
	},
	{
		name:       "Namespace",
		collection: "/api/v1/namespaces", item: "/api/v1/namespaces/team",
		key: "/registry/namespaces/team", resource: "namespaces",
		create:  map[string]any{"metadata": map[string]any{"name": "team", "labels": map[string]string{"tier": "a"}}},
		update:  map[string]any{"metadata": map[string]any{"name": "team", "labels": map[string]string{"tier": "b"}}},
		changed: func(obj map[string]any) string { return dig(obj, "metadata", "labels", "tier") },
		before:  "a", after: "b",
		message: `namespaces "team"` + versionRequiredMsg,
		allowed: map[registry.UnconditionalUpdate]bool{registry.UnconditionalKube: true},
	},
}

// TestUnconditionalUpdateModes: a PUT without resourceVersion or If-Match,
// under each --unconditional-update mode, of each kind of object: the
// code, reason and message, what is stored, and the metric.
func TestUnconditionalUpdateModes(t *testing.T) {
	const hint = " (Helm sends neither for its release records: start the server with --unconditional-update=helm-releases to accept them)"
	for _, mode := range []registry.UnconditionalUpdate{registry.UnconditionalHelmReleases, registry.UnconditionalNone, registry.UnconditionalKube} {
		t.Run(mode.String(), func(t *testing.T) {
			s := startServerWithOptions(t, serverOptions{storeOpts: []registry.StoreOption{registry.WithUnconditionalUpdate(mode)}})
			wantCount := map[string]float64{}
			for _, tc := range unconditionalCases {
				t.Run(tc.name, func(t *testing.T) {
					resp := s.do(t, http.MethodPost, tc.collection, tc.create)
					if resp.Code != http.StatusCreated {
						t.Fatalf("create: %d %s", resp.Code, resp.Body)
					}
					var created map[string]any
					resp.decode(t, &created)
					createdRV := dig(created, "metadata", "resourceVersion")
					_, storedRev := s.storedRevision(t, tc.key)

					resp = s.do(t, http.MethodPut, tc.item, tc.update)
					var got map[string]any
					if tc.allowed[mode] {
						if resp.Code != http.StatusOK {
							t.Fatalf("PUT without a version = %d %s; want 200", resp.Code, resp.Body)
						}
						wantCount[tc.resource]++
						resp.decode(t, &got)
						if rv := dig(got, "metadata", "resourceVersion"); rv == createdRV || rv == "" {
							t.Errorf("answer resourceVersion = %q; want a new one (created at %s)", rv, createdRV)
						}
						if uid, createdUID := dig(got, "metadata", "uid"), dig(created, "metadata", "uid"); uid != createdUID {
							t.Errorf("answer uid = %q; want the stored %q", uid, createdUID)
						}
					} else {
						if resp.Code != http.StatusPreconditionRequired {
							t.Fatalf("PUT without a version = %d %s; want 428", resp.Code, resp.Body)
						}
						st := resp.status(t)
						want := tc.message
						if mode == registry.UnconditionalNone && tc.helmRecordInModeNo {
							want += hint
						}
						if st.Reason != registry.StatusReasonPreconditionRequired || st.Message != want {
							t.Errorf("428 Status reason %q, message %q; want %q, %q", st.Reason, st.Message, registry.StatusReasonPreconditionRequired, want)
						}
					}

					resp = s.do(t, http.MethodGet, tc.item, nil)
					if resp.Code != http.StatusOK {
						t.Fatalf("GET: %d %s", resp.Code, resp.Body)
					}
					var read map[string]any
					resp.decode(t, &read)
					want, wantRV := tc.before, createdRV
					if tc.allowed[mode] {
						want, wantRV = tc.after, dig(got, "metadata", "resourceVersion")
					}
					if g := tc.changed(read); g != want {
						t.Errorf("stored after the PUT: %q; want %q", g, want)
					}
					if rv := dig(read, "metadata", "resourceVersion"); rv != wantRV {
						t.Errorf("resourceVersion after the PUT = %s; want %s", rv, wantRV)
					}
					if _, rev := s.storedRevision(t, tc.key); !tc.allowed[mode] && rev != storedRev {
						t.Errorf("etcd revision of %s = %d after a refused PUT; want %d (nothing written)", tc.key, rev, storedRev)
					}
				})
			}

			families := scrape(t, s)
			for _, resource := range []string{"configmaps", "secrets", "namespaces"} {
				labels := map[string]string{"group": "", "resource": resource}
				if got := value(t, families, "concord_unconditional_updates_total", labels); got != wantCount[resource] {
					t.Errorf("concord_unconditional_updates_total%v = %v; want %v", labels, got, wantCount[resource])
				}
			}
			if m, ok := find(families, "concord_unconditional_updates_total", map[string]string{"group": "coordination.k8s.io", "resource": "leases"}); ok {
				t.Errorf("concord_unconditional_updates_total has a series for leases (%v); want none: kube never allows it", m)
			}
		})
	}
}

// storedRevision is the ModRevision of key in etcd (0: absent).
func (s *testServer) storedRevision(t *testing.T, key string) (string, int64) {
	t.Helper()
	resp, err := s.Etcd.Client.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("etcd get %s: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
}

// TestUnconditionalUpdateNeedsAHelmRecordStored: under helm-releases, the
// object overwritten must be a Helm release record too, so a label on the
// PUT does not let it overwrite a ConfigMap that is not one; and a PUT that
// drops the label is not a Helm record's.
func TestUnconditionalUpdateNeedsAHelmRecordStored(t *testing.T) {
	s := startServer(t)
	for _, name := range []string{"app", "web.v1"} {
		body := map[string]any{"metadata": map[string]any{"name": name}, "data": map[string]string{"k": "v"}}
		if name == "web.v1" {
			body["metadata"].(map[string]any)["labels"] = map[string]string{"owner": "helm"}
		}
		if resp := s.do(t, http.MethodPost, nsPath, body); resp.Code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", name, resp.Code, resp.Body)
		}
	}
	tests := []struct {
		name, wantMessage string
		body              map[string]any
	}{
		{"labelled PUT over a plain ConfigMap", `configmaps "app"` + versionRequiredMsg + "; the stored object is not a Helm release record, so it is not replaced without one",
			map[string]any{"metadata": map[string]any{"name": "app", "labels": map[string]string{"owner": "helm"}}, "data": map[string]string{"k": "mine"}}},
		{"unlabelled PUT over a Helm record", `configmaps "web.v1"` + versionRequiredMsg,
			map[string]any{"metadata": map[string]any{"name": "web.v1"}, "data": map[string]string{"k": "mine"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := dig(tc.body, "metadata", "name")
			key := "/registry/configmaps/default/" + name
			before, rev := s.storedRevision(t, key)
			resp := s.do(t, http.MethodPut, nsPath+"/"+name, tc.body)
			if resp.Code != http.StatusPreconditionRequired {
				t.Fatalf("PUT = %d %s; want 428", resp.Code, resp.Body)
			}
			if st := resp.status(t); st.Message != tc.wantMessage {
				t.Errorf("428 message = %q; want %q", st.Message, tc.wantMessage)
			}
			if after, afterRev := s.storedRevision(t, key); after != before || afterRev != rev {
				t.Errorf("stored %s changed by a refused PUT (revision %d, was %d)", key, afterRev, rev)
			}
		})
	}
	labels := map[string]string{"group": "", "resource": "configmaps"}
	if got := value(t, scrape(t, s), "concord_unconditional_updates_total", labels); got != 0 {
		t.Errorf("concord_unconditional_updates_total%v = %v; want 0", labels, got)
	}
}

// racingStorage lets another writer change the object just before the
// first update's transaction, so that the transaction fails, and counts
// the updates the server sends.
type racingStorage struct {
	*etcdstore.Store
	once    sync.Once
	mu      sync.Mutex
	updates []error // the outcome of each of the server's updates
}

func (s *racingStorage) Update(ctx context.Context, ref etcdstore.Ref, value []byte, revision int64, guards ...etcdstore.Guard) (int64, error) {
	var err error
	s.once.Do(func() {
		var cur etcdstore.Object
		if cur, err = s.Store.Get(ctx, ref, 0); err != nil {
			return
		}
		var cm corev1.ConfigMap
		if err = json.Unmarshal(cur.Value, &cm); err != nil {
			return
		}
		cm.Data["other"] = "writer"
		var competing []byte
		if competing, err = json.Marshal(&cm); err != nil {
			return
		}
		_, err = s.Store.Update(ctx, ref, competing, cur.Revision)
	})
	if err != nil {
		return 0, err
	}
	rev, err := s.Store.Update(ctx, ref, value, revision, guards...)
	s.mu.Lock()
	s.updates = append(s.updates, err)
	s.mu.Unlock()
	return rev, err
}

// TestUnconditionalUpdateRetriesALostRace: when another write lands between
// the read of an unconditional replace and its transaction, the
// transaction fails and the replace reads again and writes over the new
// state, guarded by its revision: 200, the client's object stored, never a
// 409 and never a write that ignored the guard. It is counted once and
// logged at debug with its etcd key and the request's auditID.
func TestUnconditionalUpdateRetriesALostRace(t *testing.T) {
	racing := &racingStorage{}
	var log syncbuf.Buffer
	s := startServerWithOptions(t, serverOptions{
		wrap:   func(st *etcdstore.Store) registry.Storage { racing.Store = st; return racing },
		logOut: &log,
	})
	labels := map[string]string{"owner": "helm", "status": "pending-upgrade"}
	body := map[string]any{"metadata": map[string]any{"name": "web.v2", "labels": labels}, "data": map[string]string{"release": "r2"}}
	if resp := s.do(t, http.MethodPost, nsPath, body); resp.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.Code, resp.Body)
	}
	labels["status"] = "deployed"
	resp := s.do(t, http.MethodPut, nsPath+"/web.v2", body)
	if resp.Code != http.StatusOK {
		t.Fatalf("PUT without a version, racing another write = %d %s; want 200", resp.Code, resp.Body)
	}
	var got corev1.ConfigMap
	resp.decode(t, &got)

	racing.mu.Lock()
	updates := racing.updates
	racing.mu.Unlock()
	if len(updates) != 2 || !errors.Is(updates[0], etcdstore.ErrConflict) || updates[1] != nil {
		t.Errorf("the server's transactions ended %v; want [conflict, nil]: the first lost the race, the second was guarded by the re-read revision", updates)
	}
	stored, rev := s.storedConfigMap(t, "/registry/configmaps/default/web.v2")
	if diff := cmp.Diff(stored.Data, map[string]string{"release": "r2"}); diff != "" {
		t.Errorf("stored data (-got +want):\n%s", diff)
	}
	if stored.Labels["status"] != "deployed" || got.ResourceVersion != strconv.FormatInt(rev, 10) {
		t.Errorf("stored status %q at revision %d, answered resourceVersion %s; want deployed, the same revision", stored.Labels["status"], rev, got.ResourceVersion)
	}
	if v := value(t, scrape(t, s), "concord_unconditional_updates_total", map[string]string{"group": "", "resource": "configmaps"}); v != 1 {
		t.Errorf("concord_unconditional_updates_total{configmaps} = %v; want 1", v)
	}

	var line map[string]any
	for _, l := range strings.Split(log.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "unconditional update" {
			line = m
		}
	}
	if line == nil {
		t.Fatalf("no log line \"unconditional update\"; log:\n%s", log.String())
	}
	if line["level"] != "DEBUG" || line["key"] != "/registry/configmaps/default/web.v2" || line["resourceVersion"] != got.ResourceVersion || line["auditID"] == "" || line["auditID"] == nil {
		t.Errorf("log line %v; want level DEBUG, key /registry/configmaps/default/web.v2, resourceVersion %s and an auditID", line, got.ResourceVersion)
	}
}

// TestUnconditionalUpdateDryRun: a dry run of an unconditional replace
// answers 200, writes nothing, and is not counted.
func TestUnconditionalUpdateDryRun(t *testing.T) {
	s := startServer(t)
	body := map[string]any{"metadata": map[string]any{"name": "web.v1", "labels": map[string]string{"owner": "helm"}}, "data": map[string]string{"release": "r1"}}
	if resp := s.do(t, http.MethodPost, nsPath, body); resp.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.Code, resp.Body)
	}
	before, rev := s.storedRevision(t, "/registry/configmaps/default/web.v1")
	body["data"] = map[string]string{"release": "r2"}
	if resp := s.do(t, http.MethodPut, nsPath+"/web.v1?dryRun=All", body); resp.Code != http.StatusOK {
		t.Fatalf("dry-run PUT without a version = %d %s; want 200", resp.Code, resp.Body)
	}
	if after, afterRev := s.storedRevision(t, "/registry/configmaps/default/web.v1"); after != before || afterRev != rev {
		t.Errorf("a dry run wrote: revision %d, was %d", afterRev, rev)
	}
	if v := value(t, scrape(t, s), "concord_unconditional_updates_total", map[string]string{"group": "", "resource": "configmaps"}); v != 0 {
		t.Errorf("concord_unconditional_updates_total{configmaps} = %v after a dry run; want 0", v)
	}
}

// eventsV1Body is a valid events.k8s.io/v1 Event labelled tier=tier (the
// one field an update of it may change here: kube keeps the rest immutable).
func eventsV1Body(tier string) map[string]any {
	return map[string]any{
		"apiVersion": "events.k8s.io/v1", "kind": "Event",
		"metadata":  map[string]any{"name": "cm.2", "labels": map[string]string{"tier": tier}},
		"eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "example.com/c", "reportingInstance": "c-1",
		"action": "A", "reason": "R", "type": "Normal", "note": "n",
		"regarding": map[string]any{"kind": "ConfigMap", "namespace": "default", "name": "cm"},
	}
}

// TestReplaceOfAMissingObjectWithoutVersion: a PUT without a
// resourceVersion of an object that does not exist is kube-apiserver's 404
// where kube's strategy does not create on update — custom resources,
// ConfigMaps, and a status — in every --unconditional-update mode; Leases
// (created on update in kube) keep Concord's 428. Nothing is stored.
func TestReplaceOfAMissingObjectWithoutVersion(t *testing.T) {
	for _, mode := range []registry.UnconditionalUpdate{registry.UnconditionalHelmReleases, registry.UnconditionalKube} {
		t.Run(mode.String(), func(t *testing.T) {
			s := startServerWithOptions(t, serverOptions{crds: true, storeOpts: []registry.StoreOption{registry.WithUnconditionalUpdate(mode)}})
			s.namespace(t, "ns")
			s.waitServed(t, s.createCRD(t, gadgetsCRD))
			lease := map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": map[string]any{"name": "missing"}}
			for _, tc := range []struct {
				path   string
				body   any
				code   int
				reason metav1.StatusReason
			}{
				{gadgets + "/missing", gadget("missing", nil), http.StatusNotFound, metav1.StatusReasonNotFound},
				{gadgets + "/missing/status", gadget("missing", nil), http.StatusNotFound, metav1.StatusReasonNotFound},
				{"/api/v1/namespaces/ns/configmaps/missing", map[string]any{"metadata": map[string]any{"name": "missing"}}, http.StatusNotFound, metav1.StatusReasonNotFound},
				{"/apis/coordination.k8s.io/v1/namespaces/ns/leases/missing", lease, http.StatusPreconditionRequired, "PreconditionRequired"},
			} {
				resp := s.do(t, http.MethodPut, tc.path, tc.body)
				st := resp.status(t)
				if resp.Code != tc.code || st.Reason != tc.reason {
					t.Errorf("PUT %s: %d %s %q; want %d %s", tc.path, resp.Code, st.Reason, st.Message, tc.code, tc.reason)
				}
			}
			for _, prefix := range []string{"/registry/example.com/gadgets/", "/registry/configmaps/ns/", "/registry/leases/"} {
				if keys := s.storedKeys(t, prefix); len(keys) != 0 {
					t.Errorf("stored under %s: %v", prefix, keys)
				}
			}
		})
	}
}
