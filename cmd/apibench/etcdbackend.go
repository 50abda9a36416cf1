package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"
)

// etcdBackend does what Concord does for each operation, as the bare etcd
// requests: the same keys (<prefix>/configmaps/<namespace>/<name>), the same
// JSON values, one request per operation. It is the physical limit of a
// server whose every write is one etcd transaction.
type etcdBackend struct {
	client  *clientv3.Client
	prefix  string
	timeout time.Duration
	streams atomic.Int64 // watch streams opened
}

func newEtcdBackend(endpoints []string, prefix string, timeout time.Duration) (*etcdBackend, error) {
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", strings.Join(endpoints, ","), err)
	}
	return &etcdBackend{client: client, prefix: "/" + strings.Trim(prefix, "/"), timeout: timeout}, nil
}

func (b *etcdBackend) close() { b.client.Close() }

func (b *etcdBackend) key(ns, name string) string {
	return b.prefix + "/configmaps/" + ns + "/" + name
}

func (b *etcdBackend) nsPrefix(ns string) string {
	return b.prefix + "/configmaps/" + ns + "/"
}

// ctx bounds one request by the request timeout; like Concord's store, it
// asks etcd to refuse at once when the member has no leader.
func (b *etcdBackend) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	return clientv3.WithRequireLeader(ctx), cancel
}

// ensureNamespace: raw etcd has no namespaces to create.
func (b *etcdBackend) ensureNamespace(context.Context, string) (bool, error) { return false, nil }

func (b *etcdBackend) deleteNamespace(context.Context, string) error { return nil }

// create is Txn If(CreateRevision(key) == 0) Then(Put).
func (b *etcdBackend) create(ctx context.Context, ns, name string, data map[string]string) (int64, error) {
	value, err := storedConfigMap(ns, name, data)
	if err != nil {
		return 0, err
	}
	key := b.key(ns, name)
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	resp, err := b.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(value))).Commit()
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", key, err)
	}
	if !resp.Succeeded {
		return 0, errExists
	}
	return resp.Header.Revision, nil
}

// update is Txn If(ModRevision(key) == rv) Then(Put) Else(Get), as
// Concord's store sends it.
func (b *etcdBackend) update(ctx context.Context, ns, name string, data map[string]string, rv int64) (int64, error) {
	value, err := storedConfigMap(ns, name, data)
	if err != nil {
		return 0, err
	}
	key := b.key(ns, name)
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	resp, err := b.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rv)).Then(clientv3.OpPut(key, string(value))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return 0, fmt.Errorf("update %s: %w", key, err)
	}
	if !resp.Succeeded {
		if r := resp.Responses[0].GetResponseRange(); r == nil || len(r.Kvs) == 0 {
			return 0, errNotFound
		}
		return 0, errConflict
	}
	return resp.Header.Revision, nil
}

// get is a linearizable Get of the key; the value is decoded as a client
// of the API decodes the answer.
func (b *etcdBackend) get(ctx context.Context, ns, name string) (map[string]string, int64, error) {
	key := b.key(ns, name)
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	resp, err := b.client.Get(ctx, key)
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, errNotFound
	}
	var cm apiObject
	if err := json.Unmarshal(resp.Kvs[0].Value, &cm); err != nil {
		return nil, 0, fmt.Errorf("get %s: decode: %w", key, err)
	}
	return cm.Data, resp.Kvs[0].ModRevision, nil
}

// list is a linearizable range read of the namespace's keys.
func (b *etcdBackend) list(ctx context.Context, ns string, check bool) (int, int64, error) {
	prefix := b.nsPrefix(ns)
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	resp, err := b.client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, 0, fmt.Errorf("list %s: %w", prefix, err)
	}
	if !check {
		return -1, resp.Header.Revision, nil
	}
	return len(resp.Kvs), resp.Header.Revision, nil
}

// watch is an etcd watch of the namespace's keys from rv+1. Every watch
// gets a gRPC stream of its own (on the client's one connection), as every
// watcher of an API server has a stream of its own: the client puts watches
// whose contexts carry the same metadata on one shared stream, which etcd
// serves with one sending goroutine.
func (b *etcdBackend) watch(ctx context.Context, ns string, rv int64, handle func(watchEvent)) (*watchStream, error) {
	prefix := b.nsPrefix(ns)
	ctx = metadata.AppendToOutgoingContext(ctx, "apibench-watch", strconv.FormatInt(b.streams.Add(1), 10))
	ch := b.client.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rv+1), clientv3.WithCreatedNotify())
	select {
	case first, ok := <-ch:
		if !ok {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("watch %s: closed before it was created", prefix)
		}
		if err := first.Err(); err != nil {
			return nil, fmt.Errorf("watch %s: %w", prefix, err)
		}
		if !first.Created {
			return nil, fmt.Errorf("watch %s: first response is not the creation", prefix)
		}
	case <-time.After(b.timeout):
		return nil, fmt.Errorf("watch %s: not created after %s", prefix, b.timeout)
	}
	ws := &watchStream{Done: make(chan struct{})}
	go func() {
		defer close(ws.Done)
		for resp := range ch {
			now := time.Now()
			if err := resp.Err(); err != nil {
				ws.Err = fmt.Errorf("watch %s: %w", prefix, err)
				// Drain so the client can finish the watch.
				for range ch {
				}
				return
			}
			for _, ev := range resp.Events {
				we := watchEvent{RV: ev.Kv.ModRevision, Received: now}
				switch {
				case ev.Type == mvccpb.Event_DELETE:
					we.Type = "DELETED"
				case ev.IsCreate():
					we.Type = "ADDED"
				default:
					we.Type = "MODIFIED"
				}
				if ev.Type == mvccpb.Event_PUT {
					var cm apiObject
					if err := json.Unmarshal(ev.Kv.Value, &cm); err == nil {
						we.Data = cm.Data
					}
				}
				handle(we)
			}
		}
		if ctx.Err() == nil {
			ws.Err = fmt.Errorf("watch %s: the stream ended", prefix)
		}
	}()
	return ws, nil
}

// deleteAll deletes the keys in transactions of at most 100 deletes
// (etcd's default --max-txn-ops is 128).
func (b *etcdBackend) deleteAll(ctx context.Context, ns string, names []string, progress func(int)) error {
	const batch = 100
	for start := 0; start < len(names); start += batch {
		var ops []clientv3.Op
		for _, name := range names[start:min(start+batch, len(names))] {
			ops = append(ops, clientv3.OpDelete(b.key(ns, name)))
		}
		rctx, cancel := b.ctx(ctx)
		_, err := b.client.Txn(rctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return fmt.Errorf("delete under %s: %w", b.nsPrefix(ns), err)
		}
		if progress != nil {
			progress(min(start+batch, len(names)))
		}
	}
	return nil
}
