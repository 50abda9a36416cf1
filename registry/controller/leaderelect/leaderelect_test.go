package leaderelect

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/registry"
)

// leases is a Lease store over a real etcd, with the system namespaces.
func leases(t *testing.T) *registry.Store {
	t.Helper()
	e := etcdtest.Start(t)
	stores := registry.NewStores(etcdstore.New(e.Client, "/registry"), registry.DefaultWatchConfig())
	catalog := registry.NewCatalog(stores)
	t.Cleanup(func() {
		for _, s := range catalog.Stores() {
			s.StopWatches()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := registry.EnsureSystemNamespaces(ctx, stores); err != nil {
		t.Fatal(err)
	}
	s, ok := catalog.Lookup("coordination.k8s.io", "v1", "leases")
	if !ok {
		t.Fatal("no lease store")
	}
	return s
}

func config(s *registry.Store, identity string) Config {
	return Config{
		Leases: s, Namespace: "kube-system", Name: "test-controller", Identity: identity,
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
	}
}

func holder(t *testing.T, s *registry.Store) (string, int32) {
	t.Helper()
	obj, err := s.Get(context.Background(), "kube-system", "test-controller")
	if err != nil {
		t.Fatal(err)
	}
	l := obj.(*coordinationv1.Lease)
	h := ""
	if l.Spec.HolderIdentity != nil {
		h = *l.Spec.HolderIdentity
	}
	return h, *l.Spec.LeaseTransitions
}

// TestOneLeaderAtATime: of three replicas one leads; when it stops (its
// context ends, so it releases the Lease), another leads at once; never two
// at the same time.
func TestOneLeaderAtATime(t *testing.T) {
	s := leases(t)
	var leading, most atomic.Int32
	led := make(chan string, 10)
	cancels := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	for i := range 3 {
		id := fmt.Sprintf("replica-%d", i)
		ctx, cancel := context.WithCancel(context.Background())
		cancels[id] = cancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			Run(ctx, config(s, id), func(ctx context.Context) {
				n := leading.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				led <- id
				<-ctx.Done()
				leading.Add(-1)
			})
		}()
	}
	t.Cleanup(func() {
		for _, c := range cancels {
			c()
		}
		wg.Wait()
	})
	first := waitLeader(t, led)
	if h, _ := holder(t, s); h != first {
		t.Fatalf("Lease held by %q; want the leader %q", h, first)
	}
	start := time.Now()
	cancels[first]()
	second := waitLeader(t, led)
	if second == first {
		t.Fatalf("%s led again after it stopped", first)
	}
	// Released: the next one does not wait for the lease duration.
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("takeover after a release took %s; want about a retry period", took)
	}
	if h, transitions := holder(t, s); h != second || transitions != 1 {
		t.Errorf("Lease held by %q with %d transitions; want %q, 1", h, transitions, second)
	}
	if m := most.Load(); m != 1 {
		t.Errorf("%d replicas led at once; want 1", m)
	}
}

// TestTakeoverWaitsForTheLeaseDuration: a holder that stopped without
// releasing (a killed replica) is taken over once its record has not
// changed for the lease duration, and not before.
func TestTakeoverWaitsForTheLeaseDuration(t *testing.T) {
	s := leases(t)
	ghost, seconds, now := "killed-replica", int32(2), metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "test-controller", Namespace: "kube-system"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &ghost, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now, LeaseTransitions: new(int32)},
	}
	if _, err := s.Create(context.Background(), "kube-system", lease, registry.WriteOptions{FieldManager: "test"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	led := make(chan string, 1)
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, config(s, "survivor"), func(ctx context.Context) { led <- "survivor"; <-ctx.Done() })
	}()
	waitLeader(t, led)
	took := time.Since(start)
	if took < 2*time.Second || took > 4*time.Second {
		t.Errorf("took over after %s; want after the 2s lease duration, within a few retry periods", took)
	}
	if h, transitions := holder(t, s); h != "survivor" || transitions != 1 {
		t.Errorf("Lease held by %q with %d transitions; want survivor, 1", h, transitions)
	}
	cancel()
	<-done
	if h, _ := holder(t, s); h != "" {
		t.Errorf("after the leader stopped the Lease is held by %q; want released", h)
	}
}

// TestLeadingEndsWhenTheLeaseIsTaken: a leader whose Lease another replica
// took (its renewals were not seen in time) stops leading at its next
// renewal.
func TestLeadingEndsWhenTheLeaseIsTaken(t *testing.T) {
	s := leases(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan struct{})
	led := make(chan string, 1)
	go Run(ctx, config(s, "a"), func(ctx context.Context) { led <- "a"; <-ctx.Done(); close(stopped) })
	waitLeader(t, led)
	// a renews every retry period: a renewal between the Get and the
	// Update makes it a conflict, so read again and take it then.
	for attempt := 0; ; attempt++ {
		obj, err := s.Get(context.Background(), "kube-system", "test-controller")
		if err != nil {
			t.Fatal(err)
		}
		l := obj.(*coordinationv1.Lease)
		other := "b"
		l.Spec.HolderIdentity = &other
		_, _, err = s.Update(context.Background(), "kube-system", "test-controller", l, registry.WriteOptions{FieldManager: "test"})
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) || attempt == 10 {
			t.Fatal(err)
		}
	}
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		t.Fatal("a still leads 2s after b took the Lease")
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name                string
		lease, renew, retry time.Duration
		wantErr             bool
	}{
		{"defaults", 0, 0, 0, false},
		{"renew deadline as long as the lease", 4 * time.Second, 4 * time.Second, time.Second, true},
		{"retry as long as the renew deadline", 4 * time.Second, 3 * time.Second, 3 * time.Second, true},
		{"short", 4 * time.Second, 3 * time.Second, 500 * time.Millisecond, false},
	}
	for _, tc := range cases {
		err := Config{LeaseDuration: tc.lease, RenewDeadline: tc.renew, RetryPeriod: tc.retry}.Validate()
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: Validate() = %v; want error %v", tc.name, err, tc.wantErr)
		}
	}
}

func waitLeader(t *testing.T, led <-chan string) string {
	t.Helper()
	select {
	case id := <-led:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("no replica leads after 10s")
		return ""
	}
}
