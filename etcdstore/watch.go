package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	// PrevValue is the value before the change; nil when the key was created.
	PrevValue []byte
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
	// ctx is the stream's context: etcd only answers a progress request on
	// the gRPC stream the request names, and the context names the stream.
	ctx    context.Context
	client *clientv3.Client
}

// RequestProgress asks etcd to report, on this watch's stream, the revision
// it has delivered everything up to.
func (w *Watch) RequestProgress() error {
	return w.client.RequestProgress(w.ctx)
}

// CurrentRevision returns the store's latest revision (a linearizable read).
func (s *Store) CurrentRevision(ctx context.Context) (int64, error) {
	ctx, end := s.begin(ctx, "revision", "")
	resp, err := s.kv.Client.Get(ctx, s.prefix+"/", clientv3.WithCountOnly(), clientv3.WithLimit(1))
	end(err)
	if err != nil {
		return 0, storeError("revision", s.prefix, err)
	}
	return resp.Header.Revision, nil
}

// Watch streams every change to resource's keys after revision from, in
// order, until ctx ends (the channel then closes) or an error (sent as the
// last response). A revision that was compacted gives ErrCompacted.
func (s *Store) Watch(ctx context.Context, resource string, from int64) (*Watch, error) {
	prefix, err := s.listPrefix(resource, "")
	if err != nil {
		return nil, err
	}
	// Each watch gets a gRPC stream of its own (clientv3 groups watches by
	// their context's metadata): etcd answers a progress request for a
	// whole stream and only once every watch on it is in sync, so a shared
	// stream would let one watch's request wait for, and wake, the others.
	ctx = metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx), "concord-watch", strconv.FormatUint(watchStreams.Add(1), 10))
	start := time.Now()
	wch := s.kv.Client.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from+1), clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	s.metrics.observe("watch-start", resource, time.Since(start), nil)
	out := make(chan WatchResponse)
	go func() {
		defer close(out)
		for resp := range wch {
			r := translate(prefix, resp)
			select {
			case out <- r:
			case <-ctx.Done():
				return
			}
			if r.Err != nil {
				return
			}
		}
	}()
	return &Watch{C: out, ctx: ctx, client: s.kv.Client}, nil
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
			e.PrevValue = ev.PrevKv.Value
		}
		out.Events = append(out.Events, e)
	}
	return out
}
