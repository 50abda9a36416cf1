package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/cmd/concord/app"
	apptesting "github.com/concord-dev/concord/cmd/concord/app/testing"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// rbacTokens are the users of the RBAC tests; none but root is privileged.
var rbacTokens = map[string]filters.UserInfo{
	"admin-token": {Name: "root", UID: "0", Groups: []string{filters.MastersGroup}},
	"alice-token": {Name: "alice", UID: "1001", Groups: []string{"team-a"}},
	"bob-token":   {Name: "bob", UID: "1002"},
	"carol-token": {Name: "carol", UID: "1003"},
}

// bannedUID is refused by the test's first authorizer, standing for a
// webhook in front of RBAC: it shows what a review's uid and extra reach.
const bannedUID = "666"

type banAuthorizer struct{}

func (banAuthorizer) Authorize(_ context.Context, a filters.Attributes) (filters.Decision, string, error) {
	if a.User.UID == bannedUID || (len(a.User.Extra["scopes"]) == 1 && a.User.Extra["scopes"][0] == "none") {
		return filters.Deny, "banned: uid " + a.User.UID + " scopes " + strings.Join(a.User.Extra["scopes"], ","), nil
	}
	return filters.NoOpinion, "", nil
}

// rbacServer is the API behind TLS as cmd/concord runs it with
// --authorization-mode=RBAC,Policy, and the test's authorizer first: the
// RBAC view over the real etcd, the escalation checks on the RBAC stores,
// kube's default roles; Etcd is there to read what was stored.
type rbacServer struct {
	*authServer
	Etcd *etcdtest.Etcd
}

func startRBACServer(t *testing.T) *rbacServer {
	t.Helper()
	e := etcdtest.Start(t)
	cfg := apptesting.Config(t, e.Endpoint)
	cfg.Security.TokenAuthFile = writeTokenFile(t, rbacTokens)
	cfg.Security.AuthorizationMode = app.AuthorizationRBAC + "," + app.AuthorizationPolicy
	out := &rbacServer{authServer: startTLSServer(t, cfg, app.WithAuthorizer(banAuthorizer{})), Etcd: e}
	for _, ns := range []string{"team", "other"} {
		out.mustCreate(t, "/api/v1/namespaces", `{"metadata":{"name":"`+ns+`"}}`)
	}
	return out
}

// mustCreate POSTs body as root.
func (s *rbacServer) mustCreate(t *testing.T, path, body string) {
	t.Helper()
	if resp := s.do(t, "admin-token", http.MethodPost, path, body); resp.Code != http.StatusCreated {
		t.Fatalf("create %s %s: %d %s", path, body, resp.Code, resp.Body)
	}
}

// storedKeys are etcd's keys under /registry that contain part.
func (s *rbacServer) storedKeys(t *testing.T, part string) []string {
	t.Helper()
	resp, err := s.Etcd.Client.Get(t.Context(), "/registry", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key), part) {
			keys = append(keys, string(kv.Key))
		}
	}
	return keys
}

const (
	rbacPath = "/apis/rbac.authorization.k8s.io/v1"
	sarPath  = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
)

func lsarPath(ns string) string {
	return "/apis/authorization.k8s.io/v1/namespaces/" + ns + "/localsubjectaccessreviews"
}

// reviewGrants are the grants the review tests ask about: alice reads
// ConfigMaps in team (a ClusterRole bound there), the group monitoring
// reads /healthz and below, carol may create SubjectAccessReviews, bob
// LocalSubjectAccessReviews in team only.
func (s *rbacServer) reviewGrants(t *testing.T) {
	t.Helper()
	for _, o := range []struct{ path, body string }{
		{rbacPath + "/clusterroles", `{"metadata":{"name":"cm-reader"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list"]}]}`},
		{rbacPath + "/namespaces/team/rolebindings", `{"metadata":{"name":"alice-reads"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cm-reader"},"subjects":[{"kind":"User","name":"alice"}]}`},
		{rbacPath + "/clusterroles", `{"metadata":{"name":"health"},"rules":[{"nonResourceURLs":["/healthz","/healthz/*"],"verbs":["get"]}]}`},
		{rbacPath + "/clusterrolebindings", `{"metadata":{"name":"health"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"health"},"subjects":[{"kind":"Group","name":"monitoring"}]}`},
		{rbacPath + "/clusterroles", `{"metadata":{"name":"reviewer"},"rules":[{"apiGroups":["authorization.k8s.io"],"resources":["subjectaccessreviews","localsubjectaccessreviews"],"verbs":["create"]}]}`},
		{rbacPath + "/clusterrolebindings", `{"metadata":{"name":"carol-reviews"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"reviewer"},"subjects":[{"kind":"User","name":"carol"}]}`},
		{rbacPath + "/namespaces/team/rolebindings", `{"metadata":{"name":"bob-reviews"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"reviewer"},"subjects":[{"kind":"User","name":"bob"}]}`},
	} {
		s.mustCreate(t, o.path, o.body)
	}
}

// invalidCauses are a 422's causes, and its message past "is invalid: ".
func invalidCauses(t *testing.T, resp response) (string, []metav1.StatusCause) {
	t.Helper()
	st := resp.status(t)
	if resp.Code != http.StatusUnprocessableEntity || st.Reason != metav1.StatusReasonInvalid || st.Details == nil {
		t.Errorf("%d %s; want 422 Invalid with details", resp.Code, resp.Body)
		return "", nil
	}
	_, msg, _ := strings.Cut(st.Message, " is invalid: ")
	return msg, st.Details.Causes
}

// TestSubjectAccessReview: the answers of the chain for the user the spec
// names (users, groups, uid, extra), resource and non-resource; kube's
// validation; create only for those granted it; nothing stored.
func TestSubjectAccessReview(t *testing.T) {
	s := startRBACServer(t)
	s.reviewGrants(t)
	for _, tc := range []struct {
		name string
		spec string
		want authorizationv1.SubjectAccessReviewStatus
	}{
		{"allowed by a RoleBinding of a ClusterRole",
			`{"user":"alice","resourceAttributes":{"namespace":"team","verb":"get","resource":"configmaps","name":"x"}}`,
			authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: `RBAC: allowed by RoleBinding "alice-reads/team" of ClusterRole "cm-reader" to User "alice"`}},
		{"not in another namespace", `{"user":"alice","resourceAttributes":{"namespace":"other","verb":"get","resource":"configmaps"}}`,
			authorizationv1.SubjectAccessReviewStatus{}},
		{"not another verb", `{"user":"alice","resourceAttributes":{"namespace":"team","verb":"delete","resource":"configmaps"}}`,
			authorizationv1.SubjectAccessReviewStatus{}},
		{"not across namespaces", `{"user":"alice","resourceAttributes":{"verb":"list","resource":"configmaps"}}`,
			authorizationv1.SubjectAccessReviewStatus{}},
		// The spec's groups are the user's, and no others: alice's own
		// group team-a is not implied.
		{"a group alone, non-resource", `{"groups":["monitoring"],"nonResourceAttributes":{"verb":"get","path":"/healthz/ready"}}`,
			authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: `RBAC: allowed by ClusterRoleBinding "health" of ClusterRole "health" to Group "monitoring"`}},
		{"non-resource, another verb", `{"groups":["monitoring"],"nonResourceAttributes":{"verb":"post","path":"/healthz"}}`,
			authorizationv1.SubjectAccessReviewStatus{}},
		{"non-resource, another path", `{"user":"prom","groups":["monitoring"],"nonResourceAttributes":{"verb":"get","path":"/metrics"}}`,
			authorizationv1.SubjectAccessReviewStatus{}},
		{"system:masters", `{"user":"x","groups":["system:masters"],"resourceAttributes":{"verb":"delete","resource":"nodes"}}`,
			authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "allowed: group system:masters may do everything"}},
		// kube's default binding of discovery, which RBAC asks before the
		// built-in grant of the Policy mode.
		{"the discovery grant needs system:authenticated", `{"user":"bob","nonResourceAttributes":{"verb":"get","path":"/version"}}`,
			authorizationv1.SubjectAccessReviewStatus{}},
		{"with system:authenticated", `{"user":"bob","groups":["system:authenticated"],"nonResourceAttributes":{"verb":"get","path":"/version"}}`,
			authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: `RBAC: allowed by ClusterRoleBinding "system:discovery" of ClusterRole "system:discovery" to Group "system:authenticated"`}},
		{"the uid reaches the authorizers", `{"user":"alice","uid":"666","resourceAttributes":{"namespace":"team","verb":"get","resource":"configmaps"}}`,
			authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "banned: uid 666 scopes "}},
		// Selectors narrow what is asked; RBAC grants without looking at
		// them. An operator this server does not know is a newer client's.
		{"with selectors", `{"user":"alice","resourceAttributes":{"namespace":"team","verb":"list","resource":"configmaps","fieldSelector":{"requirements":[{"key":"metadata.name","operator":"In","values":["x"]}]},"labelSelector":{"rawSelector":"app=web"}}}`,
			authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: `RBAC: allowed by RoleBinding "alice-reads/team" of ClusterRole "cm-reader" to User "alice"`}},
		{"with an operator of a newer client", `{"user":"alice","resourceAttributes":{"namespace":"team","verb":"list","resource":"configmaps","labelSelector":{"requirements":[{"key":"app","operator":"Near","values":["web"]}]}}}`,
			authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: `RBAC: allowed by RoleBinding "alice-reads/team" of ClusterRole "cm-reader" to User "alice"`}},
		{"so does extra", `{"user":"alice","uid":"1001","extra":{"scopes":["none"]},"resourceAttributes":{"namespace":"team","verb":"get","resource":"configmaps"}}`,
			authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "banned: uid 1001 scopes none"}},
	} {
		for _, caller := range []string{"admin-token", "carol-token"} {
			resp := s.do(t, caller, http.MethodPost, sarPath, `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":`+tc.spec+`}`)
			if resp.Code != http.StatusCreated {
				t.Errorf("%s, asked by %s: %d %s; want 201", tc.name, caller, resp.Code, resp.Body)
				continue
			}
			var got authorizationv1.SubjectAccessReview
			resp.decode(t, &got)
			if got.Status != tc.want {
				t.Errorf("%s, asked by %s: status %+v; want %+v", tc.name, caller, got.Status, tc.want)
			}
			var spec authorizationv1.SubjectAccessReviewSpec
			if err := json.Unmarshal([]byte(tc.spec), &spec); err != nil {
				t.Fatal(err)
			}
			if b, _ := json.Marshal(got.Spec); string(b) != mustJSON(t, spec) {
				t.Errorf("%s: the answer's spec %s; want the spec asked about %s", tc.name, b, mustJSON(t, spec))
			}
		}
	}

	for _, tc := range []struct {
		name, body string
		msg        string
		causes     []metav1.StatusCause
	}{
		{"neither attributes", `{"spec":{"user":"alice"}}`,
			`spec: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified`,
			[]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec", Message: "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified"}}},
		{"both attributes", `{"spec":{"user":"alice","resourceAttributes":{"verb":"get"},"nonResourceAttributes":{"verb":"get","path":"/x"}}}`,
			`spec: Invalid value: {"path":"/x","verb":"get"}: exactly one of nonResourceAttributes or resourceAttributes must be specified`,
			[]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec", Message: `Invalid value: {"path":"/x","verb":"get"}: exactly one of nonResourceAttributes or resourceAttributes must be specified`}}},
		{"no user or groups", `{"spec":{"resourceAttributes":{"verb":"get"}}}`,
			`spec.user: Invalid value: "": at least one of user or group must be specified`,
			[]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.user", Message: `Invalid value: "": at least one of user or group must be specified`}}},
		{"nothing", `{"spec":{}}`,
			`[spec: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified, spec.user: Invalid value: "": at least one of user or group must be specified]`,
			[]metav1.StatusCause{
				{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec", Message: "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified"},
				{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.user", Message: `Invalid value: "": at least one of user or group must be specified`}}},
		{"a field selector with both forms", `{"spec":{"user":"alice","resourceAttributes":{"verb":"list","fieldSelector":{"rawSelector":"a=b","requirements":[{"key":"a","operator":"In","values":["b"]}]}}}}`,
			`spec.resourceAttributes.fieldSelector.rawSelector: Invalid value: "a=b": may not specified at the same time as requirements`,
			[]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.resourceAttributes.fieldSelector.rawSelector", Message: `Invalid value: "a=b": may not specified at the same time as requirements`}}},
		{"an empty label selector", `{"spec":{"user":"alice","resourceAttributes":{"verb":"list","labelSelector":{}}}}`,
			`spec.resourceAttributes.labelSelector.requirements: Required value: when spec.resourceAttributes.labelSelector is specified, requirements or rawSelector is required`,
			[]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueRequired, Field: "spec.resourceAttributes.labelSelector.requirements", Message: `Required value: when spec.resourceAttributes.labelSelector is specified, requirements or rawSelector is required`}}},
		{"a field requirement without a key", `{"spec":{"user":"alice","resourceAttributes":{"verb":"list","fieldSelector":{"requirements":[{"operator":"Exists"}]}}}}`,
			`spec.resourceAttributes.fieldSelector.requirements[0].key: Required value: must be specified`,
			[]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueRequired, Field: "spec.resourceAttributes.fieldSelector.requirements[0].key", Message: `Required value: must be specified`}}},
		{"a label requirement In without values", `{"spec":{"user":"alice","resourceAttributes":{"verb":"list","labelSelector":{"requirements":[{"key":"app","operator":"In"}]}}}}`,
			`spec.resourceAttributes.labelSelector.requirements[0].values: Required value: must be specified when ` + "`operator`" + ` is 'In' or 'NotIn'`,
			[]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueRequired, Field: "spec.resourceAttributes.labelSelector.requirements[0].values", Message: `Required value: must be specified when ` + "`operator`" + ` is 'In' or 'NotIn'`}}},
		{"metadata", `{"metadata":{"name":"x"},"spec":{"user":"alice","resourceAttributes":{"verb":"get"}}}`,
			`metadata: Invalid value: {"name":"x"}: must be empty`,
			[]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "metadata", Message: `Invalid value: {"name":"x"}: must be empty`}}},
	} {
		msg, causes := invalidCauses(t, s.do(t, "carol-token", http.MethodPost, sarPath, tc.body))
		if msg != tc.msg || mustJSON(t, causes) != mustJSON(t, tc.causes) {
			t.Errorf("%s: %q %+v; want %q %+v", tc.name, msg, causes, tc.msg, tc.causes)
		}
	}

	// Not granted create: kube's 403, whatever the body.
	wantStatus(t, "alice creates a SubjectAccessReview", s.do(t, "alice-token", http.MethodPost, sarPath, `{"spec":{"user":"alice","resourceAttributes":{"verb":"get"}}}`),
		http.StatusForbidden, metav1.StatusReasonForbidden,
		`subjectaccessreviews.authorization.k8s.io is forbidden: User "alice" cannot create resource "subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope`)
	// bob's grant is in team, and a SubjectAccessReview is cluster-scoped.
	wantStatus(t, "bob creates a SubjectAccessReview", s.do(t, "bob-token", http.MethodPost, sarPath, `{"spec":{"user":"alice","resourceAttributes":{"verb":"get"}}}`),
		http.StatusForbidden, metav1.StatusReasonForbidden,
		`subjectaccessreviews.authorization.k8s.io is forbidden: User "bob" cannot create resource "subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope`)
	if resp := s.do(t, "carol-token", http.MethodGet, sarPath, ""); resp.Code != http.StatusForbidden {
		t.Errorf("carol lists subjectaccessreviews: %d; want 403 (only create is granted)", resp.Code)
	}
	if resp := s.do(t, "admin-token", http.MethodGet, sarPath, ""); resp.Code != http.StatusMethodNotAllowed {
		t.Errorf("root lists subjectaccessreviews: %d; want 405 (create only)", resp.Code)
	}
	if keys := s.storedKeys(t, "accessreview"); len(keys) != 0 {
		t.Errorf("stored: %v; want no review stored", keys)
	}
}

// TestLocalSubjectAccessReview: as a SubjectAccessReview within the URL's
// namespace, which metadata.namespace defaults to and
// spec.resourceAttributes.namespace must be (kube's answers otherwise).
func TestLocalSubjectAccessReview(t *testing.T) {
	s := startRBACServer(t)
	s.reviewGrants(t)
	allowed := authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: `RBAC: allowed by RoleBinding "alice-reads/team" of ClusterRole "cm-reader" to User "alice"`}
	for _, tc := range []struct {
		name, caller, ns, body string
		want                   authorizationv1.SubjectAccessReviewStatus
	}{
		{"allowed", "bob-token", "team", `{"metadata":{"namespace":"team"},"spec":{"user":"alice","resourceAttributes":{"namespace":"team","verb":"list","resource":"configmaps"}}}`, allowed},
		{"metadata.namespace defaults to the URL's", "bob-token", "team", `{"spec":{"user":"alice","resourceAttributes":{"namespace":"team","verb":"list","resource":"configmaps"}}}`, allowed},
		{"not allowed", "carol-token", "other", `{"metadata":{"namespace":"other"},"spec":{"user":"alice","resourceAttributes":{"namespace":"other","verb":"list","resource":"configmaps"}}}`,
			authorizationv1.SubjectAccessReviewStatus{}},
		{"a group", "carol-token", "team", `{"metadata":{"namespace":"team"},"spec":{"groups":["system:masters"],"resourceAttributes":{"namespace":"team","verb":"delete","resource":"secrets"}}}`,
			authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "allowed: group system:masters may do everything"}},
	} {
		resp := s.do(t, tc.caller, http.MethodPost, lsarPath(tc.ns), tc.body)
		if resp.Code != http.StatusCreated {
			t.Errorf("%s: %d %s; want 201", tc.name, resp.Code, resp.Body)
			continue
		}
		var got authorizationv1.LocalSubjectAccessReview
		resp.decode(t, &got)
		if got.Status != tc.want || got.Namespace != tc.ns || got.Kind != "LocalSubjectAccessReview" {
			t.Errorf("%s: namespace %q kind %q status %+v; want %q, LocalSubjectAccessReview, %+v", tc.name, got.Namespace, got.Kind, got.Status, tc.ns, tc.want)
		}
	}

	for _, tc := range []struct {
		name, ns, body string
		msg            string
		causes         []metav1.StatusCause
	}{
		{"spec namespace differs", "team", `{"metadata":{"namespace":"team"},"spec":{"user":"alice","resourceAttributes":{"namespace":"other","verb":"get"}}}`,
			`spec.resourceAttributes.namespace: Invalid value: "other": must match metadata.namespace`,
			[]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.resourceAttributes.namespace", Message: `Invalid value: "other": must match metadata.namespace`}}},
		{"spec namespace missing", "team", `{"metadata":{"namespace":"team"},"spec":{"user":"alice","resourceAttributes":{"verb":"get"}}}`,
			`spec.resourceAttributes.namespace: Invalid value: "": must match metadata.namespace`,
			[]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.resourceAttributes.namespace", Message: `Invalid value: "": must match metadata.namespace`}}},
		{"non-resource", "team", `{"spec":{"user":"alice","nonResourceAttributes":{"verb":"get","path":"/x"}}}`,
			`spec.nonResourceAttributes: Invalid value: {"path":"/x","verb":"get"}: disallowed on this kind of request`,
			[]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.nonResourceAttributes", Message: `Invalid value: {"path":"/x","verb":"get"}: disallowed on this kind of request`}}},
		{"no user or groups", "team", `{"spec":{"resourceAttributes":{"namespace":"team","verb":"get"}}}`,
			`spec.user: Invalid value: "": at least one of user or group must be specified`,
			[]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.user", Message: `Invalid value: "": at least one of user or group must be specified`}}},
		{"metadata beyond the namespace", "team", `{"metadata":{"name":"x"},"spec":{"user":"alice","resourceAttributes":{"namespace":"team","verb":"get"}}}`,
			`metadata: Invalid value: {"name":"x","namespace":"team"}: must be empty except for namespace`,
			[]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "metadata", Message: `Invalid value: {"name":"x","namespace":"team"}: must be empty except for namespace`}}},
	} {
		msg, causes := invalidCauses(t, s.do(t, "carol-token", http.MethodPost, lsarPath(tc.ns), tc.body))
		if msg != tc.msg || mustJSON(t, causes) != mustJSON(t, tc.causes) {
			t.Errorf("%s: %q %+v; want %q %+v", tc.name, msg, causes, tc.msg, tc.causes)
		}
	}
	// metadata.namespace other than the URL's: kube's create handler.
	wantStatus(t, "metadata.namespace differs from the URL's", s.do(t, "carol-token", http.MethodPost, lsarPath("team"),
		`{"metadata":{"namespace":"other"},"spec":{"user":"alice","resourceAttributes":{"namespace":"other","verb":"get"}}}`),
		http.StatusBadRequest, metav1.StatusReasonBadRequest, "the namespace of the provided object does not match the namespace sent on the request")
	// No namespace in the URL: the resource is namespaced, so no such path.
	if resp := s.do(t, "admin-token", http.MethodPost, "/apis/authorization.k8s.io/v1/localsubjectaccessreviews",
		`{"spec":{"user":"alice","resourceAttributes":{"verb":"get"}}}`); resp.Code != http.StatusNotFound {
		t.Errorf("POST without a namespace: %d %s; want 404", resp.Code, resp.Body)
	}

	// bob may create them in team only.
	wantStatus(t, "bob in other", s.do(t, "bob-token", http.MethodPost, lsarPath("other"), `{"spec":{"user":"alice","resourceAttributes":{"namespace":"other","verb":"get"}}}`),
		http.StatusForbidden, metav1.StatusReasonForbidden,
		`localsubjectaccessreviews.authorization.k8s.io is forbidden: User "bob" cannot create resource "localsubjectaccessreviews" in API group "authorization.k8s.io" in the namespace "other"`)
	wantStatus(t, "alice in team", s.do(t, "alice-token", http.MethodPost, lsarPath("team"), `{"spec":{"user":"alice","resourceAttributes":{"namespace":"team","verb":"get"}}}`),
		http.StatusForbidden, metav1.StatusReasonForbidden,
		`localsubjectaccessreviews.authorization.k8s.io is forbidden: User "alice" cannot create resource "localsubjectaccessreviews" in API group "authorization.k8s.io" in the namespace "team"`)
	if keys := s.storedKeys(t, "accessreview"); len(keys) != 0 {
		t.Errorf("stored: %v; want no review stored", keys)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEscalationPrevention: kube's policy-based RBAC storage over HTTP. A
// Role or ClusterRole may grant only what its writer holds through RBAC
// (in the role's namespace; a ClusterRole bound there counts) unless the
// writer may escalate; a binding may bind only a role whose rules the
// writer holds unless it may bind that role (by name). A refusal is 403
// with kube's message, and stores nothing.
func TestEscalationPrevention(t *testing.T) {
	s := startRBACServer(t)
	for _, o := range []struct{ path, body string }{
		{rbacPath + "/clusterroles", `{"metadata":{"name":"rbac-writer"},"rules":[{"apiGroups":["rbac.authorization.k8s.io"],"resources":["roles","clusterroles","rolebindings","clusterrolebindings"],"verbs":["create","update","get"]}]}`},
		{rbacPath + "/clusterrolebindings", `{"metadata":{"name":"alice-writes-rbac"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"rbac-writer"},"subjects":[{"kind":"User","name":"alice"}]}`},
		{rbacPath + "/clusterroles", `{"metadata":{"name":"cm-reader"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list"]}]}`},
		{rbacPath + "/namespaces/team/rolebindings", `{"metadata":{"name":"alice-reads"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cm-reader"},"subjects":[{"kind":"User","name":"alice"}]}`},
		{rbacPath + "/clusterroles", `{"metadata":{"name":"secret-reader"},"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]}]}`},
		{rbacPath + "/clusterroles", `{"metadata":{"name":"pod-deleter"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["delete"]}]}`},
	} {
		s.mustCreate(t, o.path, o.body)
	}
	const notHeld = `user "alice" (groups=["team-a" "system:authenticated"]) is attempting to grant RBAC permissions not currently held:` + "\n"
	const secretsGet = `{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}`
	role := func(name, rules string) string { return `{"metadata":{"name":"` + name + `"},"rules":` + rules + `}` }
	binding := func(name, kind, ref string) string {
		return `{"metadata":{"name":"` + name + `"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"` + kind + `","name":"` + ref + `"},"subjects":[{"kind":"User","name":"bob"}]}`
	}
	type step struct {
		name, method, path, body string
		code                     int
		msg                      string // of a refusal
	}
	run := func(steps []step) {
		t.Helper()
		for _, st := range steps {
			if st.method == http.MethodPut { // a replace says which version it replaces
				st.body = withResourceVersion(t, st.body, s.do(t, "admin-token", http.MethodGet, st.path, ""))
			}
			resp := s.do(t, "alice-token", st.method, st.path, st.body)
			if st.msg == "" {
				if resp.Code != st.code {
					t.Errorf("%s: %d %s; want %d", st.name, resp.Code, resp.Body, st.code)
				}
				continue
			}
			reason := metav1.StatusReasonForbidden
			if st.code == http.StatusNotFound {
				reason = metav1.StatusReasonNotFound
			}
			wantStatus(t, st.name, resp, st.code, reason, st.msg)
			if st.method == http.MethodPost {
				var meta struct {
					Metadata metav1.ObjectMeta `json:"metadata"`
				}
				if err := json.Unmarshal([]byte(st.body), &meta); err != nil {
					t.Fatal(err)
				}
				// <prefix>/rbac.authorization.k8s.io/<plural>/[<namespace>/]<name>
				key := "/rbac.authorization.k8s.io" + strings.TrimPrefix(st.path, rbacPath) + "/" + meta.Metadata.Name
				if parts := strings.Split(key, "/"); len(parts) == 6 { // namespaced: [ "" group namespaces ns plural name ]
					key = strings.Join([]string{"", parts[1], parts[4], parts[3], parts[5]}, "/")
				}
				if slices.Contains(s.storedKeys(t, key), "/registry"+key) {
					t.Errorf("%s: %s stored; want nothing stored", st.name, key)
				}
			}
		}
	}
	run([]step{
		{"a Role of rules held through a ClusterRole bound in its namespace", http.MethodPost, rbacPath + "/namespaces/team/roles",
			role("cm", `[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}]`), http.StatusCreated, ""},
		{"a Role of rules not held", http.MethodPost, rbacPath + "/namespaces/team/roles",
			role("secrets", `[{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]}]`), http.StatusForbidden,
			`roles.rbac.authorization.k8s.io "secrets" is forbidden: ` + notHeld + secretsGet},
		{"the missing rules compacted, one a line, sorted", http.MethodPost, rbacPath + "/namespaces/team/roles",
			role("many", `[{"apiGroups":[""],"resources":["secrets"],"verbs":["get","list"]},{"apiGroups":[""],"resources":["configmaps","pods"],"verbs":["get","create"]}]`), http.StatusForbidden,
			`roles.rbac.authorization.k8s.io "many" is forbidden: ` + notHeld +
				`{APIGroups:[""], Resources:["configmaps"], Verbs:["create"]}` + "\n" +
				`{APIGroups:[""], Resources:["pods"], Verbs:["get" "create"]}` + "\n" +
				`{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}`},
		{"held in team, not in other", http.MethodPost, rbacPath + "/namespaces/other/roles",
			role("cm", `[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}]`), http.StatusForbidden,
			`roles.rbac.authorization.k8s.io "cm" is forbidden: ` + notHeld + `{APIGroups:[""], Resources:["configmaps"], Verbs:["get"]}`},
		{"held in a namespace, not cluster-wide", http.MethodPost, rbacPath + "/clusterroles",
			role("cm", `[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}]`), http.StatusForbidden,
			`clusterroles.rbac.authorization.k8s.io "cm" is forbidden: ` + notHeld + `{APIGroups:[""], Resources:["configmaps"], Verbs:["get"]}`},
		{"an update that adds a rule not held", http.MethodPut, rbacPath + "/namespaces/team/roles/cm",
			role("cm", `[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","delete"]}]`), http.StatusForbidden,
			`roles.rbac.authorization.k8s.io "cm" is forbidden: ` + notHeld + `{APIGroups:[""], Resources:["configmaps"], Verbs:["delete"]}`},
		{"a RoleBinding to a ClusterRole whose rules are held there", http.MethodPost, rbacPath + "/namespaces/team/rolebindings",
			binding("bob-cm", "ClusterRole", "cm-reader"), http.StatusCreated, ""},
		{"a RoleBinding to a Role whose rules are held", http.MethodPost, rbacPath + "/namespaces/team/rolebindings",
			binding("bob-role", "Role", "cm"), http.StatusCreated, ""},
		{"a RoleBinding to a ClusterRole not held", http.MethodPost, rbacPath + "/namespaces/team/rolebindings",
			binding("bob-secrets", "ClusterRole", "secret-reader"), http.StatusForbidden,
			`rolebindings.rbac.authorization.k8s.io "bob-secrets" is forbidden: ` + notHeld + secretsGet},
		{"a ClusterRoleBinding to a ClusterRole held in a namespace only", http.MethodPost, rbacPath + "/clusterrolebindings",
			binding("bob-cm", "ClusterRole", "cm-reader"), http.StatusForbidden,
			`clusterrolebindings.rbac.authorization.k8s.io "bob-cm" is forbidden: ` + notHeld + `{APIGroups:[""], Resources:["configmaps"], Verbs:["get" "list"]}`},
		{"a binding to a missing role", http.MethodPost, rbacPath + "/namespaces/team/rolebindings",
			binding("bob-gone", "ClusterRole", "gone"), http.StatusNotFound, `clusterroles.rbac.authorization.k8s.io "gone" not found`},
		// Escalation is decided before validation, as kube's RBAC storage.
		{"a Role that escalates and is invalid too", http.MethodPost, rbacPath + "/namespaces/team/roles",
			role("invalid", `[{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]},{"apiGroups":[""],"resources":["configmaps"]}]`), http.StatusForbidden,
			`roles.rbac.authorization.k8s.io "invalid" is forbidden: ` + notHeld + secretsGet},
		{"a Role that does not escalate and is invalid", http.MethodPost, rbacPath + "/namespaces/team/roles",
			role("invalid", `[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]},{"apiGroups":[""],"resources":["configmaps"]}]`), http.StatusUnprocessableEntity, ""},
		// kube answers 500 (unsupported role reference kind); the
		// binding's validation says what is wrong.
		{"a binding to a role of an unsupported kind", http.MethodPost, rbacPath + "/namespaces/team/rolebindings",
			binding("bob-odd", "Odd", "cm"), http.StatusUnprocessableEntity, ""},
	})
	var cm struct {
		Rules []struct{ Verbs []string } `json:"rules"`
	}
	s.do(t, "admin-token", http.MethodGet, rbacPath+"/namespaces/team/roles/cm", "").decode(t, &cm)
	if len(cm.Rules) != 1 || strings.Join(cm.Rules[0].Verbs, ",") != "get" {
		t.Errorf("Role cm after the refused update: %+v; want its rule unchanged (get)", cm.Rules)
	}

	// bind on the ClusterRole secret-reader by name, in team.
	s.mustCreate(t, rbacPath+"/namespaces/team/roles", `{"metadata":{"name":"binder"},"rules":[{"apiGroups":["rbac.authorization.k8s.io"],"resources":["clusterroles"],"resourceNames":["secret-reader"],"verbs":["bind"]}]}`)
	s.mustCreate(t, rbacPath+"/namespaces/team/rolebindings", `{"metadata":{"name":"alice-binds"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"binder"},"subjects":[{"kind":"User","name":"alice"}]}`)
	run([]step{
		{"bind allowed for that role there", http.MethodPost, rbacPath + "/namespaces/team/rolebindings",
			binding("bob-secrets", "ClusterRole", "secret-reader"), http.StatusCreated, ""},
		{"bind is for team only", http.MethodPost, rbacPath + "/namespaces/other/rolebindings",
			binding("bob-secrets", "ClusterRole", "secret-reader"), http.StatusForbidden,
			`rolebindings.rbac.authorization.k8s.io "bob-secrets" is forbidden: ` + notHeld + secretsGet},
		{"bind names one role", http.MethodPost, rbacPath + "/namespaces/team/rolebindings",
			binding("bob-pods", "ClusterRole", "pod-deleter"), http.StatusForbidden,
			`rolebindings.rbac.authorization.k8s.io "bob-pods" is forbidden: ` + notHeld + `{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}`},
		{"bind is no grant of the role's rules", http.MethodPost, rbacPath + "/namespaces/team/roles",
			role("secrets", `[{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]}]`), http.StatusForbidden,
			`roles.rbac.authorization.k8s.io "secrets" is forbidden: ` + notHeld + secretsGet},
	})

	// escalate on roles, in team.
	s.mustCreate(t, rbacPath+"/namespaces/team/roles", `{"metadata":{"name":"escalator"},"rules":[{"apiGroups":["rbac.authorization.k8s.io"],"resources":["roles"],"verbs":["escalate"]}]}`)
	s.mustCreate(t, rbacPath+"/namespaces/team/rolebindings", `{"metadata":{"name":"alice-escalates"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"escalator"},"subjects":[{"kind":"User","name":"alice"}]}`)
	run([]step{
		{"escalate allows a Role of any rules", http.MethodPost, rbacPath + "/namespaces/team/roles",
			role("secrets", `[{"apiGroups":[""],"resources":["secrets"],"verbs":["get","delete"]}]`), http.StatusCreated, ""},
		{"and an update", http.MethodPut, rbacPath + "/namespaces/team/roles/cm",
			role("cm", `[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]`), http.StatusOK, ""},
		{"escalate on roles is not on clusterroles", http.MethodPost, rbacPath + "/clusterroles",
			role("secrets", `[{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]}]`), http.StatusForbidden,
			`clusterroles.rbac.authorization.k8s.io "secrets" is forbidden: ` + notHeld + secretsGet},
		{"escalate is no bind", http.MethodPost, rbacPath + "/namespaces/team/rolebindings",
			binding("bob-escalated", "Role", "secrets"), http.StatusForbidden,
			`rolebindings.rbac.authorization.k8s.io "bob-escalated" is forbidden: ` + notHeld + `{APIGroups:[""], Resources:["secrets"], Verbs:["get" "delete"]}`},
	})
}

// withResourceVersion is body with the resourceVersion of the object read.
func withResourceVersion(t *testing.T, body string, read response) string {
	t.Helper()
	var cur struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	read.decode(t, &cur)
	var obj map[string]any
	if err := json.Unmarshal([]byte(body), &obj); err != nil {
		t.Fatal(err)
	}
	obj["metadata"].(map[string]any)["resourceVersion"] = cur.Metadata.ResourceVersion
	return mustJSON(t, obj)
}
