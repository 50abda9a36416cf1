package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// racingAdmission records, on each admission, the policies' generation
// as etcd has it — as a view that is current — and, while races > 0,
// then changes the policies (a policy written on another replica between
// the write's admission and its transaction).
type racingAdmission struct {
	storage  Storage
	policies *Store
	mu       sync.Mutex
	races    int
	admitted int
	written  int // policies written, for their names
}

func (a *racingAdmission) Mutate(ctx context.Context, req *AdmissionRequest) error {
	return a.admit(ctx)
}

func (a *racingAdmission) Validate(ctx context.Context, req *AdmissionRequest) error {
	return a.admit(ctx)
}

func (a *racingAdmission) admit(ctx context.Context) error {
	gen := int64(0)
	if stored, err := a.storage.Get(ctx, AdmissionPolicyGeneration, 0); err == nil {
		gen = stored.Revision
	} else if !errors.Is(err, etcdstore.ErrNotFound) {
		return err
	}
	RecordAdmissionPolicies(ctx, gen)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.admitted++
	if a.races == 0 {
		return nil
	}
	a.races--
	a.written++
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", a.written)},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "true"}},
		},
	}
	_, err := a.policies.Create(context.WithoutCancel(ctx), "", policy, WriteOptions{})
	return err
}

// TestAdmissionGuard: a write admitted on the policies of one generation
// is refused by etcd when a policy changed before its transaction,
// nothing is written, the view is waited for, and the write is admitted
// again; while they keep changing, a create gives up with 503.
func TestAdmissionGuard(t *testing.T) {
	e := etcdtest.Start(t)
	bumping := etcdstore.NewWithOptions(e.Client, "/registry", etcdstore.Options{Bump: AdmissionPolicyBump()})
	var caughtUp []int64
	storage := AdmissionGuardedStorage(bumping, func(_ context.Context, rev int64) error {
		caughtUp = append(caughtUp, rev)
		return nil
	})
	policies := NewStore(bumping, ValidatingAdmissionPolicies, DefaultWatchConfig())
	adm := &racingAdmission{storage: bumping, policies: policies}
	stores := NewStores(storage, DefaultWatchConfig(), WithAdmission(adm))
	var configMaps, namespaces *Store
	for _, s := range stores {
		switch s.Resource {
		case ConfigMaps:
			configMaps = s
		case Namespaces:
			namespaces = s
		}
	}
	t.Cleanup(func() {
		for _, s := range append(stores, policies) {
			s.StopWatches()
		}
	})
	if err := EnsureSystemNamespaces(testCtx(t), stores); err != nil {
		t.Fatal(err)
	}
	ctx := WithAdmissionRecord(testCtx(t))
	if _, err := configMaps.Create(ctx, "default", configMap("cm", map[string]string{"a": "1"}), WriteOptions{}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		write func(ctx context.Context) error
	}{
		{"create", func(ctx context.Context) error {
			_, err := configMaps.Create(ctx, "default", configMap("new", nil), WriteOptions{})
			return err
		}},
		{"create cluster-scoped", func(ctx context.Context) error {
			_, err := namespaces.Create(ctx, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, WriteOptions{})
			return err
		}},
		{"update", func(ctx context.Context) error {
			_, _, err := configMaps.Update(ctx, "default", "cm", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"a": "2"}}, WriteOptions{IfMatch: func(string) bool { return true }})
			return err
		}},
		{"delete", func(ctx context.Context) error {
			_, err := configMaps.Delete(ctx, "default", "cm", nil, WriteOptions{})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caughtUp = nil
			adm.mu.Lock()
			adm.races, adm.admitted = 1, 0
			adm.mu.Unlock()
			if err := tt.write(WithAdmissionRecord(testCtx(t))); err != nil {
				t.Fatalf("the write: %v; want it admitted again and written", err)
			}
			gen, err := bumping.Get(testCtx(t), AdmissionPolicyGeneration, 0)
			if err != nil {
				t.Fatal(err)
			}
			// Admitted on the old generation, refused, caught up with the
			// new one, admitted again.
			if len(caughtUp) != 1 || caughtUp[0] != gen.Revision {
				t.Errorf("caught up with %v; want [%d]", caughtUp, gen.Revision)
			}
			if adm.admitted < 2 {
				t.Errorf("admitted %d times; want again after the refusal", adm.admitted)
			}
		})
	}

	t.Run("policies keep changing", func(t *testing.T) {
		adm.mu.Lock()
		adm.races, adm.admitted = 100, 0
		adm.mu.Unlock()
		_, err := configMaps.Create(WithAdmissionRecord(testCtx(t)), "default", configMap("never", nil), WriteOptions{})
		if code := apierrors.ReasonForError(err); code != metav1.StatusReasonServiceUnavailable {
			t.Fatalf("err = %v (%s); want 503 ServiceUnavailable", err, code)
		}
		if _, err := configMaps.Get(testCtx(t), "default", "never"); !apierrors.IsNotFound(err) {
			t.Fatalf("get after the refused create: %v; want NotFound", err)
		}
	})
}
