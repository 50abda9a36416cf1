package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/concord-dev/concord/etcdstore"
)

// PrefixStorage is what WatchPrefix reads the keys from; registry.Storage
// has it.
type PrefixStorage interface {
	List(ctx context.Context, resource, namespace string, opts etcdstore.ListOptions) (etcdstore.ListResult, error)
	Watch(ctx context.Context, resource string, from int64, opts etcdstore.WatchOptions) (*etcdstore.Watch, error)
}

// KV is one key under a watched prefix (Key, relative to the prefix), its
// value (nil: deleted) and the revision of its last change. The embedded
// Object is what a registry store decodes (registry.Store.Decode).
type KV struct {
	etcdstore.Object
}

// PrefixHandler is what a watcher of the raw keys under a prefix does with
// them, for one that reads several resources' keys at one revision (the
// RBAC view). Nil funcs are skipped.
type PrefixHandler struct {
	// Event is called with each page of the keys present when the watch
	// opens (initial true; all read at the revision Synced then names),
	// then with each batch of changes as etcd sends them (initial false; in
	// revision order, every change of one revision in the same batch).
	Event func(ctx context.Context, kvs []KV, initial bool) error
	// Synced is called once the watch from the revision rev the initial
	// keys were read at is open: the handler has every key as of rev. w
	// asks that watch for progress.
	Synced func(ctx context.Context, rev int64, w *PrefixWatch) error
	// Progress is called for each batch without changes etcd sends (a
	// progress report): every change up to rev has been handed to Event.
	Progress func(ctx context.Context, rev int64) error
	// Ended is called each time the watch ends or fails to open, with
	// why: what the handler holds is no longer kept current.
	Ended func(err error)
}

// PrefixWatch is the watch WatchPrefix has open.
type PrefixWatch struct{ w *etcdstore.Watch }

// RequestProgress asks etcd to report the watch's progress (a Progress
// call follows); a failed request is never answered.
func (p *PrefixWatch) RequestProgress() error { return p.w.RequestProgress() }

// prefixPageSize is how many keys one read of the initial keys returns.
const prefixPageSize = 1000

// WatchPrefix hands the keys under prefix of storage and their changes to
// h until ctx ends. A watch that ends, whatever the reason (a compacted
// revision included), or an error from h, is followed after RewatchDelay
// by a new read of every key and a new watch.
func WatchPrefix(ctx context.Context, storage PrefixStorage, prefix string, opts WatchOptions, h PrefixHandler) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.RewatchDelay <= 0 {
		opts.RewatchDelay = DefaultRewatchDelay
	}
	for ctx.Err() == nil {
		if err := watchPrefixOnce(ctx, storage, prefix, h); err != nil && ctx.Err() == nil {
			opts.Log.Warn(opts.Name+": the watch ended; watching again", "prefix", prefix, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(opts.RewatchDelay):
		}
	}
}

// watchPrefixOnce reads every key under prefix at one revision, watches
// from it and returns when the watch ends, with why.
func watchPrefixOnce(ctx context.Context, storage PrefixStorage, prefix string, h PrefixHandler) (err error) {
	if h.Ended != nil {
		defer func() { h.Ended(err) }()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var rev int64
	for start := ""; ; {
		res, err := storage.List(ctx, prefix, "", etcdstore.ListOptions{Revision: rev, Limit: prefixPageSize, Start: start})
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
		rev = res.Revision
		kvs := make([]KV, len(res.Objects))
		for i, o := range res.Objects {
			kvs[i] = KV{o}
		}
		if err := callKVs(h.Event, ctx, kvs, true); err != nil {
			return err
		}
		if res.Remaining == 0 || len(res.Objects) == 0 {
			break
		}
		start = res.Objects[len(res.Objects)-1].Key + "\x00"
	}
	w, err := storage.Watch(ctx, prefix, rev, etcdstore.WatchOptions{})
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	if h.Synced != nil {
		if err := h.Synced(ctx, rev, &PrefixWatch{w}); err != nil {
			return err
		}
	}
	for resp := range w.C {
		if resp.Err != nil {
			return resp.Err
		}
		if len(resp.Events) == 0 {
			if err := call(h.Progress, ctx, resp.Progress); err != nil {
				return err
			}
			continue
		}
		kvs := make([]KV, len(resp.Events))
		for i, ev := range resp.Events {
			kvs[i] = KV{etcdstore.Object{Key: ev.Key, Value: ev.Value, Revision: ev.Revision}}
		}
		if err := callKVs(h.Event, ctx, kvs, false); err != nil {
			return err
		}
	}
	return errors.New("watch closed")
}

func callKVs(f func(context.Context, []KV, bool) error, ctx context.Context, kvs []KV, initial bool) error {
	if f == nil {
		return nil
	}
	return f(ctx, kvs, initial)
}
