package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The graph is fed by one watch per resource, each at its own pace: an
// object written before its owner's deletion started may not be in the
// graph yet when that deletion is looked at. Every resource shares etcd's
// revisions, so a decision that needs the graph to hold every dependent
// written up to revision R (letting an orphaning or foreground owner go)
// first waits until every watch has applied everything up to R, asking
// etcd for the progress of those behind (a watch of a resource nobody
// writes hears nothing otherwise).

// errWatchesBehind: the wait for the watches ran out; the decision is
// looked at again later, never taken on a graph that may miss dependents.
var errWatchesBehind = errors.New("the watches had not reached the revision")

// progressAskInterval is how often a watch behind is asked for progress
// while a decision waits for it.
const progressAskInterval = 100 * time.Millisecond

// reached records that m's watch has applied every change up to rev (an
// event's revision, or a bookmark's) and wakes the decisions waiting.
func (c *Collector) reached(m *monitor, rev int64) {
	c.progressMu.Lock()
	defer c.progressMu.Unlock()
	if rev <= m.seen {
		return
	}
	m.seen = rev
	close(c.advanced)
	c.advanced = make(chan struct{})
}

// watching adds or (stop) removes m from the watches decisions wait for.
func (c *Collector) watching(m *monitor, stop bool) {
	c.progressMu.Lock()
	defer c.progressMu.Unlock()
	if stop {
		delete(c.watches, m)
		// One gone may have been all a decision waited for.
		close(c.advanced)
		c.advanced = make(chan struct{})
		return
	}
	c.watches[m] = struct{}{}
}

// behind returns the watches that have not applied everything up to rev,
// and a channel closed when any watch moves on.
func (c *Collector) behind(rev int64) ([]*monitor, <-chan struct{}) {
	c.progressMu.Lock()
	defer c.progressMu.Unlock()
	var out []*monitor
	for m := range c.watches {
		if m.seen < rev {
			out = append(out, m)
		}
	}
	return out, c.advanced
}

// awaitWatches waits, up to Config.WatchWait, until every watch has
// applied every change up to rev, so that the graph holds every object
// written by then; it asks etcd for the progress of those behind.
func (c *Collector) awaitWatches(ctx context.Context, rev int64) error {
	deadline := time.NewTimer(c.cfg.WatchWait)
	defer deadline.Stop()
	ask := time.NewTicker(progressAskInterval)
	defer ask.Stop()
	reported := false
	for {
		behind, advanced := c.behind(rev)
		if len(behind) == 0 {
			return nil
		}
		if !reported && c.awaiting != nil {
			c.awaiting(rev, resourcesOf(behind))
		}
		reported = true
		for _, m := range behind {
			m.askProgress()
		}
		select {
		case <-advanced:
		case <-ask.C:
		case <-deadline.C:
			return fmt.Errorf("%w %d after %v (behind: %v)", errWatchesBehind, rev, c.cfg.WatchWait, resourcesOf(behind))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// askProgress asks etcd for the progress of m's watch, at most once per
// progressAskInterval.
func (m *monitor) askProgress() {
	m.c.progressMu.Lock()
	due := time.Since(m.askedAt) >= progressAskInterval
	if due {
		m.askedAt = time.Now()
	}
	m.c.progressMu.Unlock()
	if due {
		// A failed request leaves the watch behind: the wait runs out and
		// the decision is looked at again.
		_ = m.store.RequestWatchProgress()
	}
}

func resourcesOf(monitors []*monitor) []schema.GroupResource {
	out := make([]schema.GroupResource, 0, len(monitors))
	for _, m := range monitors {
		out = append(out, m.store.Resource.GroupResource())
	}
	slices.SortFunc(out, func(a, b schema.GroupResource) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// awaitWatchesFor waits for the watches to reach the revision the graph
// saw n at (awaitWatches).
func (c *Collector) awaitWatchesFor(ctx context.Context, n *node) error {
	rev, err := strconv.ParseInt(n.resourceVersion, 10, 64)
	if err != nil {
		return fmt.Errorf("%s %s/%s: resourceVersion %q is not a revision: %w", n.store.Resource.Kind, n.namespace, n.name, n.resourceVersion, err)
	}
	return c.awaitWatches(ctx, rev)
}
