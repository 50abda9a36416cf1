package registry

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/concord-dev/concord/etcdstore"
)

// readCache keeps the latest stored state of every object of one resource in
// memory, kept current by an etcd watch of its own, so that a get or a full
// list costs one small etcd read, shared with concurrent reads (revision.go),
// instead of reading the objects: kube-apiserver's consistent reads from its
// watch cache. A read served from it is still linearizable: it takes etcd's
// current revision from a quorum read sent after the read began, and waits
// until the cache has applied everything up to that revision, asking etcd
// for a progress report when no event of this resource says so.
//
// The cache starts with the first read that could use it and serves from
// the reads after it has loaded; a broken watch resets it and the next read
// starts it again. Values are kept as stored (encrypted ones stay
// encrypted).
type readCache struct {
	store *Store

	mu    sync.Mutex
	state cacheState
	// gen counts starts, so that a finished watch resets only its own.
	gen    int
	cancel context.CancelFunc
	watch  *etcdstore.Watch
	// rev: the cache holds etcd's state at this revision.
	rev int64
	// objects by key relative to the resource's prefix (namespace/name).
	objects map[string]*cacheEntry
	// sorted is objects in key order, shared read-only by lists; nil after
	// a change (rebuilt by the next list).
	sorted []*cacheEntry
	// advanced is closed (and replaced) whenever rev moves.
	advanced chan struct{}
	// askedAt is when progress was last asked of etcd.
	askedAt time.Time
}

// cacheEntry is one object as stored, and its decoding once a list that
// needs decoded objects (protobuf, selectors) asked for it. The decoded
// object is shared by every such list: never mutate it.
type cacheEntry struct {
	stored  etcdstore.Object
	once    sync.Once
	decoded Object
	err     error
	// served: the stored value is the object as served (asServed).
	servedOnce sync.Once
	served     bool
	// encoded is the decoded object's protobuf encoding, made by the first
	// protobuf get or list that serves it (protobuf).
	protoOnce sync.Once
	encoded   []byte
	protoErr  error
}

// protobuf is obj's (the entry's decoded object) protobuf encoding, shared
// by every get and list that serves the entry: the entry is one revision of
// the object, and never changes.
func (e *cacheEntry) protobuf(obj Object) ([]byte, error) {
	e.protoOnce.Do(func() {
		m, ok := obj.(protoMarshaler)
		if !ok {
			e.protoErr = fmt.Errorf("%T has no protobuf encoding", obj)
			return
		}
		e.encoded, e.protoErr = m.Marshal()
	})
	return e.encoded, e.protoErr
}

func (e *cacheEntry) decode(s *Store) (Object, error) {
	e.once.Do(func() { e.decoded, e.err = s.decode(s.Resource.storagePrefix()+"/"+e.stored.Key, e.stored) })
	return e.decoded, e.err
}

// asServed reports whether the stored value is, but for resourceVersion,
// the object as s serves it (decoded with Resource.ReadStored and encoded
// again, it is the same bytes), decided once per entry.
func (e *cacheEntry) asServed(s *Store) bool {
	e.servedOnce.Do(func() {
		obj, err := e.decode(s)
		if err != nil {
			return
		}
		key := s.Resource.storagePrefix() + "/" + e.stored.Key
		served, err := s.serialize(copyObject(obj))
		if err != nil {
			return
		}
		plaintext, _, err := s.unseal(key, e.stored.Value)
		e.served = err == nil && bytes.Equal(served, plaintext)
	})
	return e.served
}

type cacheState int

const (
	cacheIdle cacheState = iota
	cacheLoading
	cacheReady
	cacheStopped
)

// cacheWaitTimeout bounds how long a read waits for the cache to reach
// etcd's revision before it reads etcd instead (kube-apiserver waits 3 s).
const cacheWaitTimeout = 3 * time.Second

// progressRetry is how long a read waiting for the cache waits for a
// progress report before it asks etcd again.
const progressRetry = 100 * time.Millisecond

func newReadCache(s *Store) *readCache {
	return &readCache{store: s, advanced: make(chan struct{})}
}

// list returns the objects of namespace (all when empty) in key order as of
// a revision at least etcd's current one, and that revision. ok is false
// when the cache cannot serve yet (the caller reads etcd).
func (c *readCache) list(ctx context.Context, namespace string) (objects []*cacheEntry, rev int64, ok bool, _ error) {
	if ok, err := c.await(ctx); !ok || err != nil {
		return nil, 0, false, err
	}
	all, rev := c.sortedLocked(), c.rev
	c.mu.Unlock()
	return inNamespace(all, namespace), rev, true, nil
}

// get returns the object at key (namespace/name; nil when there is none)
// as of a revision at least etcd's current one. ok is false when the cache
// cannot serve yet (the caller reads etcd).
func (c *readCache) get(ctx context.Context, key string) (_ *cacheEntry, ok bool, _ error) {
	if ok, err := c.await(ctx); !ok || err != nil {
		return nil, false, err
	}
	e := c.objects[key]
	c.mu.Unlock()
	return e, true, nil
}

// peek is the cache's entry of key as it is now, without waiting for the
// cache to be as current as etcd (nil: no such object); ok is false when
// the cache does not serve (not loaded, broken).
func (c *readCache) peek(key string) (_ *cacheEntry, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != cacheReady {
		if c.state == cacheIdle {
			c.startLocked()
		}
		return nil, false
	}
	return c.objects[key], true
}

// await waits until the cache holds etcd's state as of a revision read
// after await was called, and returns with c.mu held (ok true). ok is
// false, and c.mu not held, when the cache cannot serve: not started (this
// starts it), loading, broken, or not caught up within cacheWaitTimeout.
func (c *readCache) await(ctx context.Context) (ok bool, _ error) {
	c.mu.Lock()
	switch c.state {
	case cacheIdle:
		c.startLocked()
		c.mu.Unlock()
		return false, nil
	case cacheLoading, cacheStopped:
		c.mu.Unlock()
		return false, nil
	}
	c.mu.Unlock()

	want, err := c.store.revisions.read(ctx)
	if err != nil {
		return false, err
	}
	wantAt := time.Now()
	var timer *time.Timer // made when the cache has to be waited for
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	c.mu.Lock()
	gen := c.gen
	for c.rev < want {
		if c.state != cacheReady {
			c.mu.Unlock()
			return false, nil
		}
		if timer == nil {
			timer = time.NewTimer(cacheWaitTimeout)
		}
		// A progress report answers for every revision current when it was
		// asked for: ask again only if the last request predates want, or
		// went unanswered for progressRetry (etcd defers a request on a
		// stream with a watch still catching up, and answers it only when
		// an event comes by on that stream).
		var ask *etcdstore.Watch
		if c.askedAt.Before(wantAt) || time.Since(c.askedAt) >= progressRetry {
			c.askedAt, ask = time.Now(), c.watch
		}
		advanced := c.advanced
		c.mu.Unlock()
		if ask != nil {
			// A failed request makes this read wait for the timeout.
			_ = ask.RequestProgress()
		}
		retry := time.NewTimer(progressRetry)
		select {
		case <-advanced:
		case <-retry.C:
		case <-timer.C:
			retry.Stop()
			// A watch that neither delivers nor reports progress is of no
			// use: start over, so that later reads do not wait as well.
			c.resetIf(gen)
			return false, nil
		case <-ctx.Done():
			retry.Stop()
			return false, ctx.Err()
		}
		retry.Stop()
		c.mu.Lock()
	}
	if c.state != cacheReady {
		c.mu.Unlock()
		return false, nil
	}
	return true, nil
}

// inNamespace is the run of sorted that belongs to namespace ("": all).
func inNamespace(sorted []*cacheEntry, namespace string) []*cacheEntry {
	if namespace == "" {
		return sorted
	}
	prefix := namespace + "/"
	from := sort.Search(len(sorted), func(i int) bool { return sorted[i].stored.Key >= prefix })
	to := from + sort.Search(len(sorted)-from, func(i int) bool { return !strings.HasPrefix(sorted[from+i].stored.Key, prefix) })
	return sorted[from:to]
}

func (c *readCache) sortedLocked() []*cacheEntry {
	if c.sorted == nil {
		c.sorted = make([]*cacheEntry, 0, len(c.objects))
		for _, e := range c.objects {
			c.sorted = append(c.sorted, e)
		}
		sort.Slice(c.sorted, func(i, j int) bool { return c.sorted[i].stored.Key < c.sorted[j].stored.Key })
	}
	return c.sorted
}

// startLocked loads the resource from etcd and watches it from there, in
// the background.
func (c *readCache) startLocked() {
	c.gen++
	ctx, cancel := context.WithCancel(context.Background())
	c.state, c.cancel = cacheLoading, cancel
	go c.load(ctx, c.gen)
}

func (c *readCache) load(ctx context.Context, gen int) {
	objects, rev, err := c.readAll(ctx)
	var w *etcdstore.Watch
	if err == nil {
		w, err = c.store.storage.Watch(ctx, c.store.Resource.storagePrefix(), rev, etcdstore.WatchOptions{})
	}
	if err != nil {
		c.resetIf(gen)
		return
	}
	c.mu.Lock()
	if c.gen != gen {
		c.mu.Unlock()
		return
	}
	c.state, c.watch, c.rev, c.objects, c.sorted = cacheReady, w, rev, objects, nil
	c.advanceLocked()
	c.mu.Unlock()
	c.run(w, gen)
}

// readAll reads every object of the resource at one revision, in pages.
func (c *readCache) readAll(ctx context.Context) (map[string]*cacheEntry, int64, error) {
	objects := map[string]*cacheEntry{}
	var rev int64
	start := ""
	for {
		res, err := c.store.storage.List(ctx, c.store.Resource.storagePrefix(), "", etcdstore.ListOptions{Revision: rev, Limit: maxPageSize, Start: start})
		if err != nil {
			return nil, 0, err
		}
		rev = res.Revision
		for _, o := range res.Objects {
			objects[o.Key] = &cacheEntry{stored: o}
		}
		if res.Remaining == 0 || len(res.Objects) == 0 {
			return objects, rev, nil
		}
		start = res.Objects[len(res.Objects)-1].Key + "\x00"
	}
}

// run applies the watch's changes until it ends; then the cache resets.
func (c *readCache) run(w *etcdstore.Watch, gen int) {
	defer c.resetIf(gen)
	for resp := range w.C {
		if resp.Err != nil {
			return
		}
		c.mu.Lock()
		if c.gen != gen {
			c.mu.Unlock()
			return
		}
		for _, ev := range resp.Events {
			if ev.Value == nil {
				delete(c.objects, ev.Key)
			} else {
				c.objects[ev.Key] = &cacheEntry{stored: etcdstore.Object{Key: ev.Key, Value: ev.Value, Revision: ev.Revision}}
			}
			c.rev = ev.Revision
		}
		if len(resp.Events) > 0 {
			c.sorted = nil
		} else if resp.Progress > c.rev {
			c.rev = resp.Progress
		}
		c.advanceLocked()
		c.mu.Unlock()
	}
}

func (c *readCache) advanceLocked() {
	close(c.advanced)
	c.advanced = make(chan struct{})
}

func (c *readCache) resetIf(gen int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen && c.state != cacheStopped {
		c.resetLocked(cacheIdle)
	}
}

func (c *readCache) resetLocked(state cacheState) {
	if c.cancel != nil {
		c.cancel()
	}
	c.gen++
	c.state, c.watch, c.objects, c.sorted, c.rev = state, nil, nil, nil, 0
	c.advanceLocked()
}

// stop ends the cache for good (server shutdown).
func (c *readCache) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resetLocked(cacheStopped)
}
