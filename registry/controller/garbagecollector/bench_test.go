package garbagecollector

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
)

// countingStorage counts the etcd requests made through it, by kind.
type countingStorage struct {
	registry.Storage
	gets, lists, creates, updates, deletes, deleted atomic.Int64
}

func (c *countingStorage) Get(ctx context.Context, ref etcdstore.Ref, revision int64) (etcdstore.Object, error) {
	c.gets.Add(1)
	return c.Storage.Get(ctx, ref, revision)
}

func (c *countingStorage) List(ctx context.Context, resource, namespace string, opts etcdstore.ListOptions) (etcdstore.ListResult, error) {
	c.lists.Add(1)
	return c.Storage.List(ctx, resource, namespace, opts)
}

func (c *countingStorage) Create(ctx context.Context, ref etcdstore.Ref, value []byte, guards ...etcdstore.Guard) (int64, error) {
	c.creates.Add(1)
	return c.Storage.Create(ctx, ref, value, guards...)
}

func (c *countingStorage) Update(ctx context.Context, ref etcdstore.Ref, value []byte, revision int64, guards ...etcdstore.Guard) (int64, error) {
	c.updates.Add(1)
	return c.Storage.Update(ctx, ref, value, revision, guards...)
}

func (c *countingStorage) Delete(ctx context.Context, ref etcdstore.Ref, revision int64, guards ...etcdstore.Guard) (int64, error) {
	c.deletes.Add(1)
	rev, err := c.Storage.Delete(ctx, ref, revision, guards...)
	if err == nil {
		c.deleted.Add(1)
	}
	return rev, err
}

func (c *countingStorage) total() int64 {
	return c.gets.Load() + c.lists.Load() + c.creates.Load() + c.updates.Load() + c.deletes.Load()
}

// BenchmarkCascade deletes one owner with 1,000 dependents (Background)
// and waits until the collector has deleted them all: seconds to
// completion, and the etcd requests per dependent from the owner's delete
// on (the wait reads nothing: it counts the deletes etcd confirmed).
func BenchmarkCascade(b *testing.B) {
	const dependents = 1000
	var counter *countingStorage
	f := newFixture(b, func(s registry.Storage) registry.Storage {
		counter = &countingStorage{Storage: s}
		return counter
	})
	f.run(b)
	var seconds, requests, deletes, gets, lists float64
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		owner := f.configMap(b, fmt.Sprintf("owner%d", i))
		for j := range dependents {
			f.configMap(b, fmt.Sprintf("dep%d-%d", i, j), ref(owner, false))
		}
		// Let the collector's watch see them all before the clock starts.
		time.Sleep(time.Second)
		before, deletedBefore := *snapshot(counter), counter.deleted.Load()
		start := time.Now()
		b.StartTimer()
		f.delete(b, f.configMaps, "default", owner.Name, metav1.DeletePropagationBackground)
		deadline := time.Now().Add(2 * time.Minute)
		for counter.deleted.Load()-deletedBefore < dependents+1 {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d dependents deleted within 2m", counter.deleted.Load()-deletedBefore-1, dependents)
			}
			time.Sleep(2 * time.Millisecond)
		}
		b.StopTimer()
		seconds += time.Since(start).Seconds()
		after := snapshot(counter)
		requests += float64(after.total - before.total)
		deletes += float64(after.deletes - before.deletes)
		gets += float64(after.gets - before.gets)
		lists += float64(after.lists - before.lists)
	}
	n := float64(b.N)
	b.ReportMetric(seconds/n, "s/cascade")
	b.ReportMetric(requests/n/dependents, "etcd-requests/dependent")
	b.ReportMetric(deletes/n/dependents, "delete-txns/dependent")
	b.ReportMetric(gets/n/dependents, "gets/dependent")
	b.ReportMetric(lists/n/dependents, "lists/dependent")
}

type counts struct{ total, gets, lists, deletes int64 }

func snapshot(c *countingStorage) *counts {
	return &counts{total: c.total(), gets: c.gets.Load(), lists: c.lists.Load(), deletes: c.deletes.Load()}
}
