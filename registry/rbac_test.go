package registry

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

func newRBACStores(t *testing.T) (map[*Resource]*Store, *etcdtest.Etcd) {
	t.Helper()
	e := etcdtest.Start(t)
	stores := NewStores(etcdstore.New(e.Client, "/registry"), DefaultWatchConfig())
	byRes := map[*Resource]*Store{}
	for _, s := range stores {
		t.Cleanup(s.StopWatches)
		byRes[s.Resource] = s
	}
	ctx := testCtx(t)
	if err := EnsureSystemNamespaces(ctx, stores); err != nil {
		t.Fatal(err)
	}
	if _, err := byRes[Namespaces].Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return byRes, e
}

// TestRBACValidation: kube's validation of the four kinds, each refusal a
// 422 with kube's cause and nothing stored; unknown verbs are stored.
func TestRBACValidation(t *testing.T) {
	stores, e := newRBACStores(t)
	meta := func(ns string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: "x", Namespace: ns} }
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}
	for _, tc := range []struct {
		name  string
		res   *Resource
		obj   Object
		cause string // "": accepted
	}{
		{"role with an unknown verb", Roles, &rbacv1.Role{ObjectMeta: meta("team"), Rules: []rbacv1.PolicyRule{{Verbs: []string{"frobnicate"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}}}, ""},
		{"role without verbs", Roles, &rbacv1.Role{ObjectMeta: meta("team"), Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}}}, "rules[0].verbs: Required value: verbs must contain at least one value"},
		{"role without apiGroups", Roles, &rbacv1.Role{ObjectMeta: meta("team"), Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, Resources: []string{"configmaps"}}}}, "rules[0].apiGroups: Required value: resource rules must supply at least one api group"},
		{"role with nonResourceURLs", Roles, &rbacv1.Role{ObjectMeta: meta("team"), Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}}}, `rules[0].nonResourceURLs: Invalid value: ["/healthz"]: namespaced rules cannot apply to non-resource URLs`},
		{"resourceNames on two resources", ClusterRoles, &rbacv1.ClusterRole{ObjectMeta: meta(""), Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, ResourceNames: []string{"a"}}}}, "rules[0].resourceNames: Required value: resource names cannot apply to multiple resources"},
		{"aggregationRule without selectors", ClusterRoles, &rbacv1.ClusterRole{ObjectMeta: meta(""), AggregationRule: &rbacv1.AggregationRule{}}, "aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil"},
		{"binding to a kind that is no role", RoleBindings, &rbacv1.RoleBinding{ObjectMeta: meta("team"), RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Secret", Name: "a"}}, `roleRef.kind: Unsupported value: "Secret": supported values: "Role", "ClusterRole"`},
		{"cluster binding to a Role", ClusterRoleBindings, &rbacv1.ClusterRoleBinding{ObjectMeta: meta(""), RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "a"}}, `roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole"`},
		{"subject of an unknown kind", RoleBindings, &rbacv1.RoleBinding{ObjectMeta: meta("team"), RoleRef: ref, Subjects: []rbacv1.Subject{{Kind: "Robot", Name: "r2"}}}, `subjects[0].kind: Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group"`},
		{"subject without a name", RoleBindings, &rbacv1.RoleBinding{ObjectMeta: meta("team"), RoleRef: ref, Subjects: []rbacv1.Subject{{Kind: "User"}}}, "subjects[0].name: Required value"},
		{"service account with a bad name", RoleBindings, &rbacv1.RoleBinding{ObjectMeta: meta("team"), RoleRef: ref, Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "A_B"}}}, `subjects[0].name: Invalid value: "A_B"`},
		{"cluster binding to a service account without namespace", ClusterRoleBindings, &rbacv1.ClusterRoleBinding{ObjectMeta: meta(""), RoleRef: ref, Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "app"}}}, "subjects[0].namespace: Required value"},
		{"user subject in another group", RoleBindings, &rbacv1.RoleBinding{ObjectMeta: meta("team"), RoleRef: ref, Subjects: []rbacv1.Subject{{Kind: "User", Name: "alice", APIGroup: "example.com"}}}, `subjects[0].apiGroup: Unsupported value: "example.com": supported values: "rbac.authorization.k8s.io"`},
		{"name with a slash", ClusterRoles, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "a/b"}}, `metadata.name: Invalid value: "a/b": may not contain '/'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := stores[tc.res]
			ns := tc.obj.GetNamespace()
			name := tc.obj.GetName()
			t.Cleanup(func() { _, _ = s.Delete(testCtx(t), ns, name, nil, WriteOptions{}) })
			_, err := s.Create(testCtx(t), ns, tc.obj, WriteOptions{})
			if tc.cause == "" {
				if err != nil {
					t.Fatalf("create: %v; want it stored", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.cause) {
				t.Fatalf("create: %v; want 422 with %q", err, tc.cause)
			}
			key := "/registry/rbac.authorization.k8s.io/" + tc.res.Plural + "/"
			if ns != "" {
				key += ns + "/"
			}
			if resp, err := e.Client.Get(testCtx(t), key+name); err != nil || len(resp.Kvs) != 0 {
				t.Fatalf("etcd %s: %v, %d keys; want nothing stored", key+name, err, len(resp.Kvs))
			}
		})
	}
}

// TestRBACBindingDefaults: roleRef.apiGroup and User/Group subjects'
// apiGroup are defaulted as kube's rbac/v1 defaults.
func TestRBACBindingDefaults(t *testing.T) {
	stores, _ := newRBACStores(t)
	s := stores[RoleBindings]
	ctx := testCtx(t)
	obj, err := s.Create(ctx, "team", &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "team"},
		RoleRef:    rbacv1.RoleRef{Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: "alice"}, {Kind: "ServiceAccount", Name: "app"}},
	}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := obj.(*rbacv1.RoleBinding)
	if b.RoleRef.APIGroup != rbacv1.GroupName || b.Subjects[0].APIGroup != rbacv1.GroupName || b.Subjects[1].APIGroup != "" {
		t.Fatalf("defaults: roleRef %+v, subjects %+v", b.RoleRef, b.Subjects)
	}
}

// TestRBACRoleRefImmutable: changing a binding's roleRef is kube 1.37's
// 422 (ValidateImmutableField): one cause, roleRef FieldValueInvalid,
// "field is immutable", the value as kube's internal RoleRef prints; the
// stored binding is unchanged.
func TestRBACRoleRefImmutable(t *testing.T) {
	stores, _ := newRBACStores(t)
	ctx := testCtx(t)
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}
	subjects := []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "alice"}}
	const wantCause = `Invalid value: {"APIGroup":"rbac.authorization.k8s.io","Kind":"ClusterRole","Name":"edit"}: field is immutable`
	for _, tc := range []struct {
		res       *Resource
		namespace string
		obj       Object
		edit      func(Object)
		kind      string
	}{
		{RoleBindings, "team", &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "team"}, RoleRef: ref, Subjects: subjects},
			func(o Object) { o.(*rbacv1.RoleBinding).RoleRef.Name = "edit" }, "RoleBinding"},
		{ClusterRoleBindings, "", &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "b"}, RoleRef: ref, Subjects: subjects},
			func(o Object) { o.(*rbacv1.ClusterRoleBinding).RoleRef.Name = "edit" }, "ClusterRoleBinding"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			s := stores[tc.res]
			created, err := s.Create(ctx, tc.namespace, tc.obj, WriteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			changed := created.DeepCopyObject().(Object)
			tc.edit(changed)
			_, _, err = s.Update(ctx, tc.namespace, "b", changed, WriteOptions{})
			var st apierrors.APIStatus
			if !errors.As(err, &st) || !apierrors.IsInvalid(err) {
				t.Fatalf("update of roleRef: %v; want 422 Invalid", err)
			}
			status := st.Status()
			want := []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Message: wantCause, Field: "roleRef"}}
			if status.Details == nil || !slices.Equal(status.Details.Causes, want) {
				t.Errorf("causes %+v; want %+v", status.Details, want)
			}
			if wantMsg := tc.kind + `.rbac.authorization.k8s.io "b" is invalid: roleRef: ` + wantCause; status.Message != wantMsg {
				t.Errorf("message %q; want %q", status.Message, wantMsg)
			}
			stored, err := s.Get(ctx, tc.namespace, "b")
			if err != nil {
				t.Fatal(err)
			}
			if stored.GetResourceVersion() != created.GetResourceVersion() {
				t.Errorf("stored resourceVersion %s; want %s (unchanged)", stored.GetResourceVersion(), created.GetResourceVersion())
			}
		})
	}
}
