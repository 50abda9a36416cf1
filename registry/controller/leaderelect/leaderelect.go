// Package leaderelect chooses the one replica that runs a controller, with
// a coordination.k8s.io/v1 Lease as client-go's leader election does: the
// holder renews the Lease every RetryPeriod; a replica that sees the same
// record for LeaseDuration (by its own clock, so clock skew between replicas
// does not matter) takes it over. Every change is a write guarded by the
// Lease's resourceVersion, so of replicas racing for it one wins. A holder
// that could not renew for RenewDeadline (shorter than LeaseDuration) stops
// leading before any other replica may start.
package leaderelect

import (
	"context"
	"errors"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/registry"
)

// client-go's defaults (and kube-controller-manager's).
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Config says which Lease is campaigned for, by whom.
type Config struct {
	// Leases is the store of coordination.k8s.io/v1 Leases.
	Leases *registry.Store
	// Namespace and Name are the Lease's.
	Namespace, Name string
	// Identity is this replica's holderIdentity; unique per process.
	Identity string
	// LeaseDuration is how long others wait, after the last renewal they
	// saw, before taking the Lease over; RenewDeadline how long the holder
	// keeps trying to renew before it stops leading; RetryPeriod the pause
	// between attempts. Zero: the defaults above.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Log                                       *slog.Logger
}

func (c *Config) setDefaults() {
	if c.LeaseDuration <= 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewDeadline <= 0 {
		c.RenewDeadline = DefaultRenewDeadline
	}
	if c.RetryPeriod <= 0 {
		c.RetryPeriod = DefaultRetryPeriod
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Validate says whether the durations can keep a single leader: the holder
// must give up before others may take over.
func (c Config) Validate() error {
	c.setDefaults()
	if c.RenewDeadline >= c.LeaseDuration {
		return errors.New("the renew deadline must be shorter than the lease duration")
	}
	if c.RetryPeriod >= c.RenewDeadline {
		return errors.New("the retry period must be shorter than the renew deadline")
	}
	return nil
}

// Run campaigns for the Lease until ctx ends. While this replica holds it,
// lead runs with a context that ends when the Lease is lost or ctx ends;
// Run waits for lead to return before it campaigns again, so one process
// never leads twice at once. When ctx ends while leading, the Lease is
// released so that another replica takes over at once.
func Run(ctx context.Context, cfg Config, lead func(ctx context.Context)) {
	cfg.setDefaults()
	e := &elector{cfg: cfg, log: cfg.Log.With("lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity)}
	for ctx.Err() == nil {
		if !e.acquire(ctx) {
			return
		}
		e.log.Info("leader election: leading")
		leadCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			lead(leadCtx)
		}()
		e.renew(leadCtx)
		stop()
		<-done
		if ctx.Err() != nil {
			e.release()
			return
		}
		e.log.Warn("leader election: lost the lease; campaigning again")
	}
}

type elector struct {
	cfg Config
	log *slog.Logger
	// observed is the Lease's resourceVersion last seen, and observedAt when
	// this replica first saw it.
	observed   string
	observedAt time.Time
	// lostTo is the holder the last attempt found, when it was another.
	lostTo string
}

// acquire tries every RetryPeriod until it holds the Lease (true) or ctx
// ends (false).
func (e *elector) acquire(ctx context.Context) bool {
	for {
		if e.tryAcquireOrRenew(ctx) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(e.cfg.RetryPeriod):
		}
	}
}

// renew renews every RetryPeriod until ctx ends or a renewal did not
// succeed within RenewDeadline.
func (e *elector) renew(ctx context.Context) {
	lastRenewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(e.cfg.RetryPeriod):
		}
		attemptCtx, cancel := context.WithDeadline(ctx, lastRenewed.Add(e.cfg.RenewDeadline))
		ok := e.tryAcquireOrRenew(attemptCtx)
		cancel()
		if ok {
			lastRenewed = time.Now()
			continue
		}
		if time.Since(lastRenewed) >= e.cfg.RenewDeadline || e.heldByOther() {
			return
		}
	}
}

// heldByOther is set when a renewal found another holder.
func (e *elector) heldByOther() bool { return e.lostTo != "" }

// tryAcquireOrRenew makes one attempt, as client-go's of the same name:
// create the Lease if it is missing, renew it if this replica holds it,
// take it over if its record has not changed for LeaseDuration.
func (e *elector) tryAcquireOrRenew(ctx context.Context) bool {
	e.lostTo = ""
	now := metav1.NewMicroTime(time.Now())
	seconds := int32(e.cfg.LeaseDuration / time.Second)
	if seconds < 1 {
		seconds = 1
	}
	obj, err := e.cfg.Leases.Get(ctx, e.cfg.Namespace, e.cfg.Name)
	if apierrors.IsNotFound(err) {
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: e.cfg.Name, Namespace: e.cfg.Namespace},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: &e.cfg.Identity, LeaseDurationSeconds: &seconds,
				AcquireTime: &now, RenewTime: &now, LeaseTransitions: new(int32),
			},
		}
		created, err := e.cfg.Leases.Create(ctx, e.cfg.Namespace, lease, registry.WriteOptions{FieldManager: registry.ServerFieldManager})
		if err != nil {
			e.debug("create", err)
			return false
		}
		e.observe(created.GetResourceVersion())
		return true
	}
	if err != nil {
		e.debug("read", err)
		return false
	}
	lease := obj.(*coordinationv1.Lease)
	if lease.ResourceVersion != e.observed {
		e.observe(lease.ResourceVersion)
	}
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	held := holder == e.cfg.Identity
	if !held && holder != "" && time.Since(e.observedAt) < e.leaseDuration(lease) {
		e.lostTo = holder
		return false
	}
	next := lease.DeepCopy()
	if !held {
		transitions := int32(0)
		if lease.Spec.LeaseTransitions != nil {
			transitions = *lease.Spec.LeaseTransitions
		}
		transitions++ // also after a release, as client-go counts
		next.Spec.HolderIdentity = &e.cfg.Identity
		next.Spec.AcquireTime = &now
		next.Spec.LeaseTransitions = &transitions
	}
	next.Spec.LeaseDurationSeconds = &seconds
	next.Spec.RenewTime = &now
	updated, _, err := e.cfg.Leases.Update(ctx, e.cfg.Namespace, e.cfg.Name, next, registry.WriteOptions{FieldManager: registry.ServerFieldManager})
	if err != nil {
		e.debug("update", err)
		return false
	}
	e.observe(updated.GetResourceVersion())
	return true
}

// leaseDuration is how long a holder's record stands: the Lease's own
// leaseDurationSeconds, as client-go reads it.
func (e *elector) leaseDuration(l *coordinationv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return e.cfg.LeaseDuration
}

func (e *elector) observe(resourceVersion string) {
	e.observed, e.observedAt = resourceVersion, time.Now()
}

// release gives the Lease up on shutdown, as client-go's ReleaseOnCancel:
// no holder, so the next replica takes it at its next attempt.
func (e *elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RetryPeriod)
	defer cancel()
	obj, err := e.cfg.Leases.Get(ctx, e.cfg.Namespace, e.cfg.Name)
	if err != nil {
		return
	}
	lease := obj.(*coordinationv1.Lease)
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != e.cfg.Identity {
		return
	}
	next := lease.DeepCopy()
	one, now := int32(1), metav1.NewMicroTime(time.Now())
	next.Spec.HolderIdentity = nil
	next.Spec.LeaseDurationSeconds = &one
	next.Spec.RenewTime = &now
	if _, _, err := e.cfg.Leases.Update(ctx, e.cfg.Namespace, e.cfg.Name, next, registry.WriteOptions{FieldManager: registry.ServerFieldManager}); err != nil {
		e.log.Warn("leader election: could not release the lease; another replica takes it over after the lease duration", "err", err)
		return
	}
	e.log.Info("leader election: released the lease")
}

// debug logs a failed attempt: conflicts are how replicas race and are
// not worth a line at info.
func (e *elector) debug(what string, err error) {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return
	}
	e.log.Debug("leader election: attempt failed", "step", what, "err", err)
}
