package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/concord-dev/concord/etcdstore"
)

// WatchConfig tunes the watch fan-out of every resource.
type WatchConfig struct {
	// HistorySize is how many recent events a resource keeps, so a watch
	// from a recent resourceVersion is served from memory. Older revisions
	// are read from etcd.
	HistorySize int
	// BufferSize is how many events may wait for one watcher; a watcher that
	// falls further behind is closed, so it relists instead of stalling the
	// others or growing memory.
	BufferSize int
	// BookmarkInterval is how often etcd is asked for its progress, which
	// becomes a BOOKMARK to watchers that allow them.
	BookmarkInterval time.Duration
}

// DefaultWatchConfig is what the server runs with.
func DefaultWatchConfig() WatchConfig {
	return WatchConfig{HistorySize: 1000, BufferSize: 100, BookmarkInterval: time.Minute}
}

// event is one change, decoded once and shared (read-only) by all watchers.
type event struct {
	rev int64
	// key is the object's key relative to the resource's prefix.
	key string
	// namespace of the object ("" when cluster-scoped).
	namespace string
	// obj is the new state, nil on delete.
	obj Object
	// prev is the state before, stamped with rev; nil on create, and when
	// it cannot be read (no watcher can have had it).
	prev Object
	// corrupt: the new state cannot be read; obj is nil. A watcher that
	// could select it gets an ERROR naming it and ends (corrupt.go).
	corrupt *corruptObjectError
	// progress marks a report that all changes up to rev were delivered.
	progress bool
	// shared: the event came from the fan-out and every watcher sees the
	// same objects, so their encodings are worth keeping.
	shared bool
	// objEncodings and prevEncodings memoize obj's and prev's encodings.
	objEncodings, prevEncodings Encodings
}

// subscription is one watcher's queue in the fan-out. The queue grows as
// events wait and is let go of once drained: most watchers wait with
// nothing queued, and a queue made at its full size up front would cost
// each of them BufferSize pointers. Only the broadcaster closes a
// subscription, under its lock, when it drops it.
type subscription struct {
	// ready holds a value while events wait or once the subscription is
	// closed.
	ready chan struct{}
	// from is the revision the subscriber had seen everything up to.
	from int64
	// limit is how many events may wait.
	limit int

	mu sync.Mutex
	// queue holds the waiting events from head on.
	queue  []*event
	head   int
	closed bool
}

// idleQueueCap is the largest queue a drained subscription keeps for reuse.
const idleQueueCap = 8

func newSubscription(from int64, limit int) *subscription {
	return &subscription{ready: make(chan struct{}, 1), from: from, limit: limit}
}

// push queues e, or reports false when limit events wait already.
func (s *subscription) push(e *event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue)-s.head >= s.limit {
		return false
	}
	if s.head > 0 && len(s.queue) == cap(s.queue) {
		// Reuse the room of the events taken, instead of growing.
		n := copy(s.queue, s.queue[s.head:])
		clear(s.queue[n:])
		s.queue, s.head = s.queue[:n], 0
	}
	s.queue = append(s.queue, e)
	s.signal()
	return true
}

// close marks the end of the events: the subscriber takes those waiting,
// then stops.
func (s *subscription) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.signal()
}

func (s *subscription) signal() {
	select {
	case s.ready <- struct{}{}:
	default: // a signal is pending already
	}
}

// next takes the oldest waiting event; ok is false when none waits, and
// closed then says that none will.
func (s *subscription) next() (e *event, ok, closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.head == len(s.queue) {
		return nil, false, s.closed
	}
	e = s.queue[s.head]
	s.queue[s.head] = nil
	s.head++
	if s.head == len(s.queue) {
		s.queue, s.head = s.queue[:0], 0
		if cap(s.queue) > idleQueueCap {
			s.queue = nil // let a burst's queue go
		}
	}
	return e, true, false
}

// broadcaster fans one etcd watch of a resource out to every watcher of that
// resource on this replica.
type broadcaster struct {
	store *Store
	cfg   WatchConfig

	mu      sync.Mutex
	running bool
	// gen counts fan-out starts, so a finished stream resets only its own.
	gen    int
	cancel context.CancelFunc
	// etcd is the running fan-out's stream.
	etcd *etcdstore.Watch
	// history holds recent events in revision order and is complete for
	// every revision after oldest.
	history []*event
	oldest  int64
	subs    map[*subscription]struct{}
	// caughtUp is closed once the stream has delivered everything up to
	// caughtUpAt, the revision that was current when the fan-out started.
	caughtUp   chan struct{}
	caughtUpAt int64

	stopOnce sync.Once
	stopped  chan struct{}
}

func newBroadcaster(store *Store, cfg WatchConfig) *broadcaster {
	return &broadcaster{store: store, cfg: cfg, subs: map[*subscription]struct{}{}, stopped: make(chan struct{})}
}

// ensureRunning starts the etcd watch if it is not running, from far enough
// back to fill the history, so that a replica that just started can serve
// watches from recent resourceVersions handed out by others.
func (b *broadcaster) ensureRunning(ctx context.Context) error {
	caughtUp, err := b.start(ctx)
	if err != nil {
		return err
	}
	// A fan-out that just started replays history first; a watcher that
	// joined in the middle of that burst would overflow its queue. Wait
	// (bounded) until the replay has reached the revision current at start.
	timer := time.NewTimer(catchUpTimeout)
	defer timer.Stop()
	select {
	case <-caughtUp:
	case <-timer.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// catchUpTimeout bounds how long a watch waits for a new fan-out's replay.
const catchUpTimeout = 5 * time.Second

// start starts the fan-out unless it runs, and returns a channel closed
// once it has caught up with etcd.
func (b *broadcaster) start(ctx context.Context) (<-chan struct{}, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.stopped:
		return nil, errWatchStopped
	default:
	}
	if b.running {
		return b.caughtUp, nil
	}
	current, err := b.store.storage.CurrentRevision(ctx)
	if err != nil {
		return nil, err
	}
	// Replay only history etcd still has: a fan-out started below the
	// compaction would fail at once, and with it every watch it took on.
	start := max(1, current-int64(b.cfg.HistorySize))
	_, err = b.store.storage.List(ctx, b.store.Resource.storagePrefix(), "", etcdstore.ListOptions{Revision: start, Limit: 1})
	if errors.Is(err, etcdstore.ErrCompacted) {
		start = current
	} else if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	w, err := b.store.storage.Watch(wctx, b.store.Resource.storagePrefix(), start, etcdstore.WatchOptions{PrevValues: true})
	if err != nil {
		cancel()
		return nil, err
	}
	b.gen++
	b.running, b.cancel, b.etcd, b.oldest, b.history = true, cancel, w, start, nil
	b.caughtUp, b.caughtUpAt = make(chan struct{}), current
	if start >= current {
		close(b.caughtUp)
	}
	go b.run(w, b.gen)
	go b.requestProgress(wctx, w, b.caughtUp)
	return b.caughtUp, nil
}

var errWatchStopped = errors.New("registry: watches stopped for shutdown")

// run moves the etcd stream's events into the history and the queues. When
// the stream ends — an error, a lost leader — every
// watcher is ended (clients watch again from their last resourceVersion) and
// the next watch restarts the fan-out.
func (b *broadcaster) run(w *etcdstore.Watch, gen int) {
	defer b.resetIf(gen)
	// latest is each key's newest event in the history: the state before
	// the key's next change, unless that change comes after it has left.
	latest := map[string]*event{}
	for resp := range w.C {
		if resp.Err != nil {
			return
		}
		events := make([]*event, 0, len(resp.Events))
		for _, ev := range resp.Events {
			e, err := b.store.decodeEvent(ev, latest[ev.Key])
			if err != nil {
				return
			}
			e.shared = true
			events = append(events, e)
			latest[ev.Key] = e
			b.store.remember(ev, e)
		}
		b.mu.Lock()
		for _, e := range events {
			b.history = append(b.history, e)
			b.dispatch(e)
		}
		if over := len(b.history) - b.cfg.HistorySize; over > 0 {
			b.oldest = b.history[over-1].rev
			for _, e := range b.history[:over] {
				if latest[e.key] == e {
					delete(latest, e.key)
				}
			}
			// Slide the window instead of copying it at every batch: append
			// moves it to a new array once the old one is used up. The
			// dropped slots are cleared so their events can be collected.
			clear(b.history[:over])
			b.history = b.history[over:]
		}
		if len(resp.Events) == 0 && resp.Progress > 0 {
			b.dispatch(&event{rev: resp.Progress, progress: true})
		}
		// Headers carry the current revision even while history replays, so
		// only a progress report or an event at that revision says the
		// stream has caught up.
		if (len(resp.Events) == 0 && resp.Progress >= b.caughtUpAt) || (len(events) > 0 && events[len(events)-1].rev >= b.caughtUpAt) {
			select {
			case <-b.caughtUp:
			default:
				close(b.caughtUp)
			}
		}
		b.mu.Unlock()
	}
}

// dispatch queues e for every subscriber; one whose queue is full is
// dropped. Called with b.mu held.
func (b *broadcaster) dispatch(e *event) {
	for sub := range b.subs {
		if e.rev <= sub.from && !e.progress {
			continue // the subscriber had this already
		}
		if !sub.push(e) {
			if e.progress {
				continue // a progress report is optional
			}
			delete(b.subs, sub)
			sub.close()
		}
	}
}

// requestProgress asks etcd for progress reports: every 100ms until the
// replay has caught up (etcd answers once the stream is in sync), then every
// BookmarkInterval while anyone listens.
func (b *broadcaster) requestProgress(ctx context.Context, w *etcdstore.Watch, caughtUp <-chan struct{}) {
	fast := time.NewTicker(100 * time.Millisecond)
	defer fast.Stop()
	for catching := true; catching; {
		select {
		case <-ctx.Done():
			return
		case <-caughtUp:
			catching = false
		case <-fast.C:
			_ = w.RequestProgress() // a failed request only delays the catch-up
		}
	}
	ticker := time.NewTicker(b.cfg.BookmarkInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			b.mu.Lock()
			listening := len(b.subs) > 0
			b.mu.Unlock()
			if listening {
				// A failed request only delays a bookmark.
				_ = w.RequestProgress()
			}
		}
	}
}

// errNotWatching: no fan-out runs to ask for progress.
var errNotWatching = errors.New("registry: the resource's watch is not running")

// RequestWatchProgress asks etcd to report the revision the resource's
// watch fan-out has delivered everything up to; every watcher that allows
// bookmarks gets it as a BOOKMARK. For a watcher that must know it has seen
// every change up to a revision (the garbage collector) sooner than the
// periodic bookmarks say it.
func (s *Store) RequestWatchProgress() error {
	b := s.watch
	b.mu.Lock()
	w := b.etcd
	b.mu.Unlock()
	if w == nil {
		return errNotWatching
	}
	return w.RequestProgress()
}

// resetIf resets the fan-out if it is still the run gen.
func (b *broadcaster) resetIf(gen int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gen == gen {
		b.resetLocked()
	}
}

// reset ends the etcd watch and every subscription; the next watch
// restarts the fan-out.
func (b *broadcaster) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.resetLocked()
}

func (b *broadcaster) resetLocked() {
	if b.cancel != nil {
		b.cancel()
	}
	b.running, b.etcd, b.history = false, nil, nil
	for sub := range b.subs {
		delete(b.subs, sub)
		sub.close()
	}
}

// stop ends every watch for good (server shutdown).
func (b *broadcaster) stop() {
	b.stopOnce.Do(func() { close(b.stopped) })
	b.reset()
}

// subscribe registers a watcher that has seen everything up to from. It
// returns the buffered events after from and the queue for later ones, or
// ok false when from is older than the history (the caller reads etcd).
func (b *broadcaster) subscribe(from int64) (backlog []*event, sub *subscription, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.running || from < b.oldest {
		return nil, nil, false
	}
	i := sort.Search(len(b.history), func(i int) bool { return b.history[i].rev > from })
	backlog = append([]*event(nil), b.history[i:]...)
	sub = newSubscription(from, b.cfg.BufferSize)
	b.subs[sub] = struct{}{}
	return backlog, sub, true
}

// unsubscribe removes a watcher that is leaving.
func (b *broadcaster) unsubscribe(sub *subscription) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs, sub)
}

// remember keeps s.recent current with a change seen on the watch.
func (s *Store) remember(ev etcdstore.Event, e *event) {
	key := e.recentKey()
	if e.obj == nil {
		s.recent.drop(key, e.rev)
		return
	}
	s.recent.put(key, etcdstore.Object{Value: ev.Value, Revision: e.rev}, e.obj)
}

// decodeEvent decodes both states of a change; the previous state carries
// the change's revision, as kube-apiserver's DELETED events do. A state
// that cannot be read is kept as the event's corrupt (the new state) or
// left out (the previous one: every watcher that could have had it got an
// ERROR when it was written, and every list that could hold it failed), so
// that one bad value ends only the watches it concerns, never the stream.
//
// Decoding is skipped where the object is known: the new state when this
// replica wrote it (written), the previous one when it is before, the
// key's last event (a copy, stamped with the change's revision).
func (s *Store) decodeEvent(ev etcdstore.Event, before *event) (*event, error) {
	e := &event{rev: ev.Revision, key: ev.Key}
	if s.Resource.Namespaced {
		for i := range len(ev.Key) {
			if ev.Key[i] == '/' {
				e.namespace = ev.Key[:i]
				break
			}
		}
	}
	key := s.Resource.storagePrefix() + "/" + ev.Key // its storageKey
	var err error
	if ev.Value != nil {
		if e.obj = s.written(ev, e); e.obj == nil {
			if e.obj, err = s.decode(key, etcdstore.Object{Value: ev.Value, Revision: ev.Revision}); err != nil {
				var ok bool
				if e.corrupt, ok = asCorrupt(err); !ok {
					return nil, fmt.Errorf("watch event %s: %w", ev.Key, err)
				}
			}
		}
	}
	if ev.PrevValue != nil {
		if before != nil && before.obj != nil && before.rev == ev.PrevRevision {
			e.prev = copyObject(before.obj)
			e.prev.SetResourceVersion(formatRevision(ev.Revision))
		} else if e.prev, err = s.decode(key, etcdstore.Object{Value: ev.PrevValue, Revision: ev.Revision}); err != nil {
			if _, ok := asCorrupt(err); !ok {
				return nil, fmt.Errorf("watch event %s (previous): %w", ev.Key, err)
			}
		}
	}
	return e, nil
}

// recentKey is the event's object's key in Store.recent (Store.recentKey):
// a namespaced object's etcd key already is "<namespace>/<name>".
func (e *event) recentKey() string {
	if e.namespace != "" {
		return e.key
	}
	return "/" + e.key
}

// written is the object this replica's write stored as ev's new state, if
// it remembers it: the same revision and bytes, written by a store whose
// stored value is the object as served (no conversion or reading on the
// way out), so decoding the value would give this object again. It is
// shared: never mutate it.
func (s *Store) written(ev etcdstore.Event, e *event) Object {
	if s.Resource.ReadStored != nil || s.Resource.Storage != nil {
		return nil
	}
	r, ok := s.recent.get(e.recentKey())
	if !ok || !r.asServed || r.obj == nil || r.stored.Revision != ev.Revision || !bytes.Equal(r.stored.Value, ev.Value) {
		return nil
	}
	return r.obj
}
