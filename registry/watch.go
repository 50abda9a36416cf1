package registry

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/etcdstore"
)

// Watch is one client's stream of changes, made by Store.Watch and consumed
// by Run.
type Watch struct {
	store     *Store
	namespace string
	filter    filter
	bookmarks bool
	// from is the revision everything up to which the client has seen.
	from int64
	// initial are the ADDED events of a watch that starts with the state.
	initial []Object
	// initialEnd: send the initial-events-end BOOKMARK after initial.
	initialEnd bool

	// Events come from the shared fan-out (backlog, then sub) or, for a
	// revision older than its history, from a watch of etcd's own (direct).
	backlog []*event
	sub     *subscription
	direct  *etcdstore.Watch
	cancel  context.CancelFunc

	// started: Step has sent the initial events and the backlog.
	started bool
	// halted: Stop was called.
	halted atomic.Bool
}

// StopWatches ends every watch of this resource; for server shutdown.
func (s *Store) StopWatches() {
	s.watch.stop()
	if s.cache != nil {
		s.cache.stop()
	}
}

// WatchesStopped reports whether StopWatches has ended the store's
// watches: none starts again, so a watcher that keeps one open for the
// server's lifetime stops when this is true.
func (s *Store) WatchesStopped() bool {
	select {
	case <-s.watch.stopped:
		return true
	default:
		return false
	}
}

// Watch starts a watch of namespace (all when empty) with kube-apiserver's
// semantics: from resourceVersion N every change after N; from "" or "0"
// (or with sendInitialEvents) an ADDED event for every object first.
func (s *Store) Watch(ctx context.Context, namespace string, opts *metainternalversion.ListOptions) (*Watch, error) {
	metainternalversion.SetListOptionsDefaults(opts, true)
	f, err := validateListOptions(s.Resource, opts)
	if err != nil {
		return nil, err
	}
	rv, err := parseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return nil, err
	}
	if err := s.watch.ensureRunning(ctx); err != nil {
		return nil, StatusError(err, s.Resource.GroupResource(), "")
	}
	w := &Watch{store: s, namespace: namespace, filter: f, bookmarks: opts.AllowWatchBookmarks}
	switch {
	case opts.SendInitialEvents != nil && *opts.SendInitialEvents:
		res, err := s.storage.List(ctx, s.Resource.storagePrefix(), namespace, etcdstore.ListOptions{})
		if err != nil {
			return nil, StatusError(err, s.Resource.GroupResource(), "")
		}
		if res.Revision < rv {
			return nil, StatusError(&resourceVersionTooLargeError{want: rv, current: res.Revision}, s.Resource.GroupResource(), "")
		}
		bad := s.newCorruptItems(f)
		for _, stored := range res.Objects {
			obj, err := s.decode(s.listedKey(namespace, stored), stored)
			if err != nil {
				if err := bad.add(err); err != nil {
					return nil, err
				}
				continue
			}
			if f.matches(obj) {
				w.initial = append(w.initial, obj)
			}
		}
		if err := bad.err(); err != nil {
			return nil, err // the initial state is a list: not a partial one
		}
		w.from, w.initialEnd = res.Revision, opts.AllowWatchBookmarks
	case rv == 0: // sendInitialEvents=false: start at the most recent revision
		if w.from, err = s.storage.CurrentRevision(ctx); err != nil {
			return nil, StatusError(err, s.Resource.GroupResource(), "")
		}
	default:
		w.from = rv
	}

	var ok bool
	if w.backlog, w.sub, ok = s.watch.subscribe(w.from); !ok {
		dctx, cancel := context.WithCancel(ctx)
		if w.direct, err = s.storage.Watch(dctx, s.Resource.storagePrefix(), w.from, etcdstore.WatchOptions{PrevValues: true}); err != nil {
			cancel()
			return nil, StatusError(err, s.Resource.GroupResource(), "")
		}
		w.cancel = cancel
	}
	return w, nil
}

// Run sends the watch's events to send, in revision order, until ctx ends,
// the server stops watches, Stop is called, the watcher falls too far
// behind (the stream just ends, and the client watches again from its last
// resourceVersion), or send fails. A compacted start revision is sent as an
// ERROR event with a 410 Expired Status; a change it could select to a
// value that cannot be read, as an ERROR event with a 500 StorageReadError
// naming its key.
func (w *Watch) Run(ctx context.Context, send SendFunc) error {
	defer w.close()
	for {
		more, err := w.Step(ctx, send)
		if !more {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.store.watch.stopped:
			return nil
		case <-w.Ready():
		}
	}
}

// errWatchEnded: the watch sent its last event, an ERROR.
var errWatchEnded = errors.New("registry: the watch ended with an ERROR event")

// Step is Run without its wait, for a caller that waits on Ready itself: it
// sends what waits (first the initial events and the backlog) and returns
// whether the watch goes on, as Run would; when it does not, the watch is
// closed. A watch read from etcd directly is sent to its end by the first
// Step. ctx only ends the watch once Stop, or Ready, wakes its caller.
func (w *Watch) Step(ctx context.Context, send SendFunc) (more bool, err error) {
	defer func() {
		if !more {
			w.close()
		}
	}()
	more, err = w.step(ctx, send)
	if errors.Is(err, errWatchEnded) {
		return false, nil
	}
	return more && err == nil, err
}

func (w *Watch) step(ctx context.Context, send SendFunc) (bool, error) {
	if !w.started {
		w.started = true
		for _, obj := range w.initial {
			if err := send(watch.Event{Type: watch.Added, Object: obj}, nil); err != nil {
				return false, err
			}
		}
		if w.initialEnd {
			if err := send(w.bookmark(w.from, true), nil); err != nil {
				return false, err
			}
		}
		for _, e := range w.backlog {
			if err := w.deliver(e, send); err != nil {
				return false, err
			}
		}
		w.initial, w.backlog = nil, nil // sent: let them go
		if w.direct != nil {
			return false, w.runDirect(ctx, send)
		}
	}
	for !w.over(ctx) {
		e, ok, closed := w.sub.next()
		if closed {
			return false, nil
		}
		if !ok {
			return true, nil
		}
		if err := w.deliver(e, send); err != nil {
			return false, err
		}
	}
	return false, nil
}

// Ready holds a value when Step may have something to do: events wait, or
// the watch may be over. Nil for a watch read from etcd directly.
func (w *Watch) Ready() <-chan struct{} {
	if w.sub == nil {
		return nil
	}
	return w.sub.ready
}

// Stop ends the watch, from any goroutine, also one that was never run:
// it leaves the fan-out, Run and Step return once they see it, and a
// caller waiting on Ready wakes.
func (w *Watch) Stop() {
	w.halted.Store(true)
	w.close()
	if w.sub != nil {
		w.sub.signal()
	}
}

// over reports whether the watch must send no more.
func (w *Watch) over(ctx context.Context) bool {
	return ctx.Err() != nil || w.halted.Load() || w.stopped()
}

// stopped reports whether the server stopped watches.
func (w *Watch) stopped() bool {
	select {
	case <-w.store.watch.stopped:
		return true
	default:
		return false
	}
}

func (w *Watch) runDirect(ctx context.Context, send SendFunc) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.store.watch.stopped:
			return nil
		case resp, ok := <-w.direct.C:
			if !ok {
				return nil
			}
			if resp.Err != nil {
				// StatusError makes every end of a stream a Status.
				status := StatusError(&watchEndedError{resp.Err}, w.store.Resource.GroupResource(), "").(apierrors.APIStatus).Status()
				return send(watch.Event{Type: watch.Error, Object: &status}, nil)
			}
			for _, ev := range resp.Events {
				e, err := w.store.decodeEvent(ev, nil)
				if err != nil {
					return err
				}
				if err := w.deliver(e, send); err != nil {
					return err
				}
			}
			if len(resp.Events) == 0 && resp.Progress > 0 {
				if err := w.deliver(&event{rev: resp.Progress, progress: true}, send); err != nil {
					return err
				}
			}
		}
	}
}

// deliver sends what e means to this watcher, if anything: objects entering
// the selection are ADDED, leaving it DELETED.
func (w *Watch) deliver(e *event, send SendFunc) error {
	if e.rev < w.from || (e.rev == w.from && !e.progress) {
		return nil // already seen
	}
	w.from = e.rev
	if e.progress {
		if !w.bookmarks {
			return nil
		}
		return send(w.bookmark(e.rev, false), nil)
	}
	if w.namespace != "" && e.namespace != w.namespace {
		return nil
	}
	if e.corrupt != nil && e.corrupt.selectedBy(w.filter) {
		st := e.corrupt.watchStatus()
		if err := send(watch.Event{Type: watch.Error, Object: &st}, nil); err != nil {
			return err
		}
		return errWatchEnded
	}
	now := e.obj != nil && w.filter.matches(e.obj)
	before := e.prev != nil && w.filter.matches(e.prev)
	switch {
	case now && before:
		return send(watch.Event{Type: watch.Modified, Object: e.obj}, e.encodings(&e.objEncodings))
	case now:
		return send(watch.Event{Type: watch.Added, Object: e.obj}, e.encodings(&e.objEncodings))
	case before:
		return send(watch.Event{Type: watch.Deleted, Object: e.prev}, e.encodings(&e.prevEncodings))
	}
	return nil
}

// bookmark is an object of the watched kind carrying only a resourceVersion
// (and, at the end of the initial events, kube's annotation saying so).
func (w *Watch) bookmark(rev int64, initialEnd bool) watch.Event {
	obj := w.store.Resource.New()
	obj.GetObjectKind().SetGroupVersionKind(w.store.Resource.GroupVersionKind())
	obj.SetResourceVersion(formatRevision(rev))
	if initialEnd {
		obj.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	}
	return watch.Event{Type: watch.Bookmark, Object: obj}
}

func (w *Watch) close() {
	if w.sub != nil {
		w.store.watch.unsubscribe(w.sub)
	}
	if w.cancel != nil {
		w.cancel()
	}
}

// DefaultWatchTimeout is kube-apiserver's: a random time in [30m, 60m), so
// that watches reconnect spread out over time.
func DefaultWatchTimeout(random float64) time.Duration {
	return time.Duration(float64(30*time.Minute) * (1 + random))
}

// SendFunc sends one event to a watcher. encodings, when not nil, memoizes
// the event object's encoded forms: the object is shared by every watcher of
// the replica, so it is encoded once per format, not once per watcher.
type SendFunc func(ev watch.Event, encodings *Encodings) error

// Encodings memoizes the encoded forms of one shared event object.
type Encodings struct {
	mu sync.Mutex
	m  map[string][]byte
}

// Get returns the object's encoding in format, encoding it on first use.
// Watchers that ask at the same time wait for the first encoder. A nil
// Encodings just encodes.
func (e *Encodings) Get(format string, encode func() ([]byte, error)) ([]byte, error) {
	if e == nil {
		return encode()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if b, ok := e.m[format]; ok {
		return b, nil
	}
	b, err := encode()
	if err != nil {
		return nil, err
	}
	if e.m == nil {
		e.m = map[string][]byte{}
	}
	e.m[format] = b
	return b, nil
}

// encodings is the memo to use for one of e's objects: only events from the
// fan-out are shared between watchers.
func (e *event) encodings(memo *Encodings) *Encodings {
	if !e.shared {
		return nil
	}
	return memo
}
