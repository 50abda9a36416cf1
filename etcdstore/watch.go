package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// Event is one change to a key under a resource's prefix.
type Event struct {
	// Key is relative to the resource prefix: "<namespace>/<name>" or "<name>".
	Key string
	// Value is the new value; nil when the key was deleted.
	Value []byte
	// PrevValue is the value before the change; nil when the key was
	// created, and unless the watch asked for it (WatchOptions.PrevValues).
	PrevValue []byte
	// PrevRevision is PrevValue's revision (0 without it).
	PrevRevision int64
	// Revision is the etcd revision of the change.
	Revision int64
}

// WatchResponse is a batch of events in revision order, or a progress
// report, or the error that ends the stream.
type WatchResponse struct {
	Events []Event
	// Progress: every change up to this revision has been delivered.
	Progress int64
	// Err ends the stream: ErrCompacted when the start revision is gone.
	Err error
}

// Watch is a stream of changes to one resource.
type Watch struct {
	C <-chan WatchResponse

	client *clientv3.Client
	// stream is the context of the gRPC stream the watch runs on now:
	// etcd only answers a progress request on the stream the request names,
	// and the context names the stream. A stalled stream is replaced.
	mu     sync.Mutex
	stream context.Context
	// asked: the reader asked for progress and has not had a report since.
	// Reports that answer only the watch's own liveness probe are not
	// passed on (readers turn reports into bookmarks for their clients).
	asked atomic.Bool
}

// RequestProgress asks etcd to report, on this watch's stream, the revision
// it has delivered everything up to.
func (w *Watch) RequestProgress() error {
	w.asked.Store(true)
	return w.requestProgress()
}

func (w *Watch) requestProgress() error {
	w.mu.Lock()
	stream := w.stream
	w.mu.Unlock()
	return w.client.RequestProgress(stream)
}

func (w *Watch) setStream(ctx context.Context) {
	w.mu.Lock()
	w.stream = ctx
	w.mu.Unlock()
}

// A watch that has heard nothing for watchQuietAfter asks etcd for its
// progress; if nothing comes within watchDeadAfter of that, its stream is
// taken for dead and the watch resumes on a new one. A member that stopped
// answering (SIGSTOP, a partition) keeps its TCP connection open, and
// gRPC's keepalive notices only after 40 s; the new stream goes to a member
// that answers (the endpoint monitor has taken the silent one out).
var (
	watchQuietAfter = 2 * time.Second
	watchDeadAfter  = 2 * time.Second
)

// errWatchStalled is what the metrics count for a replaced stream.
var errWatchStalled = errors.New("etcdstore: watch stream stalled")

// CurrentRevision returns the store's latest revision (a linearizable
// read), through the store's Monitor when it has one.
func (s *Store) CurrentRevision(ctx context.Context) (int64, error) {
	ctx, end := s.begin(ctx, "revision", "")
	var rev int64
	var err error
	if s.monitor != nil {
		rev, err = s.monitor.CurrentRevision(ctx, s.prefix+"/")
	} else {
		var resp *clientv3.GetResponse
		if resp, err = s.kv.Client.Get(ctx, s.prefix+"/", clientv3.WithCountOnly(), clientv3.WithLimit(1)); err == nil {
			rev = resp.Header.Revision
		}
	}
	end(err)
	if err != nil {
		return 0, storeError("revision", s.prefix, err)
	}
	return rev, nil
}

// WatchOptions qualify one watch.
type WatchOptions struct {
	// PrevValues: events carry the value before the change. etcd then reads
	// it from its backend for every update and delete, and sends it along:
	// a watcher that knows the previous state already should not ask.
	PrevValues bool
}

// Watch streams every change to resource's keys after revision from, in
// order, until ctx ends (the channel then closes) or an error (sent as the
// last response). A revision that was compacted gives ErrCompacted.
func (s *Store) Watch(ctx context.Context, resource string, from int64, opts WatchOptions) (*Watch, error) {
	prefix, err := s.listPrefix(resource, "")
	if err != nil {
		return nil, err
	}
	w := &Watch{client: s.kv.Client}
	stream, cancel, wch := s.openWatch(ctx, resource, prefix, from, opts)
	w.setStream(stream)
	out := make(chan WatchResponse)
	w.C = out
	go func() {
		defer close(out)
		defer func() { cancel() }()
		// last is the revision the watch has delivered everything up to:
		// where a new stream resumes.
		last := from
		quiet := time.NewTimer(watchQuietAfter)
		defer quiet.Stop()
		probed := false
		heard := time.Now() // when the stream last said anything
		for {
			select {
			case resp, ok := <-wch:
				if !ok {
					return // ctx ended
				}
				heard = time.Now()
				r := translate(prefix, resp)
				if n := len(r.Events); n > 0 {
					last = max(last, r.Events[n-1].Revision)
				} else if resp.IsProgressNotify() {
					// Not the created notice: its revision is the store's,
					// with the replay still to come.
					last = max(last, resp.Header.Revision)
					if probed && !w.asked.Load() {
						// The answer to the liveness probe alone.
						probed = false
						quiet.Reset(watchQuietAfter)
						continue
					}
					w.asked.Store(false)
				}
				select {
				case out <- r:
				case <-ctx.Done():
					return
				}
				if r.Err != nil {
					return
				}
				probed = false
				quiet.Reset(watchQuietAfter)
			case <-quiet.C:
				if !probed {
					_ = w.requestProgress() // a failed request: the stream is dead, found below
					probed = true
					quiet.Reset(watchDeadAfter)
					continue
				}
				// etcd reports no progress to a watch that starts after
				// its revision: if nothing was written since, there is
				// nothing to miss, whatever the stream's state.
				if rev, err := s.CurrentRevision(ctx); err == nil && rev <= last {
					probed = false
					quiet.Reset(watchQuietAfter)
					continue
				}
				cancel()
				s.metrics.observe("watch", resource, time.Since(heard), errWatchStalled)
				stream, cancel, wch = s.openWatch(ctx, resource, prefix, last, opts)
				w.setStream(stream)
				heard = time.Now()
				probed = false
				quiet.Reset(watchQuietAfter)
				if w.asked.Load() {
					_ = w.requestProgress() // the reader's request went to the dead stream
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return w, nil
}

// openWatch starts one etcd watch of prefix after revision from, on a gRPC
// stream of its own (clientv3 groups watches by their context's metadata):
// etcd answers a progress request for a whole stream and only once every
// watch on it is in sync, so a shared stream would let one watch's request
// wait for, and wake, the others.
func (s *Store) openWatch(ctx context.Context, resource, prefix string, from int64, opts WatchOptions) (context.Context, context.CancelFunc, clientv3.WatchChan) {
	ctx, cancel := context.WithCancel(ctx)
	ctx = metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx), "concord-watch", strconv.FormatUint(watchStreams.Add(1), 10))
	start := time.Now()
	options := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithRev(from + 1), clientv3.WithProgressNotify()}
	if opts.PrevValues {
		options = append(options, clientv3.WithPrevKV())
	}
	wch := s.kv.Client.Watch(ctx, prefix, options...)
	s.metrics.observe("watch-start", resource, time.Since(start), nil)
	return ctx, cancel, wch
}

// watchStreams numbers the watches' gRPC streams.
var watchStreams atomic.Uint64

func translate(prefix string, resp clientv3.WatchResponse) WatchResponse {
	if err := resp.Err(); err != nil {
		if errors.Is(err, rpctypes.ErrCompacted) || resp.CompactRevision > 0 {
			return WatchResponse{Err: fmt.Errorf("watch %s from a compacted revision (compacted up to %d): %w", prefix, resp.CompactRevision, ErrCompacted)}
		}
		return WatchResponse{Err: fmt.Errorf("watch %s: %w", prefix, err)}
	}
	out := WatchResponse{Progress: resp.Header.Revision}
	for _, ev := range resp.Events {
		e := Event{Key: strings.TrimPrefix(string(ev.Kv.Key), prefix), Revision: ev.Kv.ModRevision}
		if ev.Type == mvccpb.PUT {
			e.Value = ev.Kv.Value
		}
		if ev.PrevKv != nil {
			e.PrevValue, e.PrevRevision = ev.PrevKv.Value, ev.PrevKv.ModRevision
		}
		out.Events = append(out.Events, e)
	}
	return out
}
