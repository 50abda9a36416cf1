package controller

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// QueueOptions pace the retries of a Queue.
type QueueOptions struct {
	// Name says whose queue it is in logs.
	Name string
	Log  *slog.Logger
	// MinRetry and MaxRetry bound the back-off of an item not done: it
	// doubles from MinRetry up to MaxRetry per item, and starts again at
	// MinRetry once the item is done.
	MinRetry, MaxRetry time.Duration
}

// Queue holds items of type T (names, uids) to work on: one added while
// queued is worked on once, one added while being worked on is worked on
// again after, and two workers never hold the same item.
type Queue[T comparable] struct {
	q    workqueue.TypedRateLimitingInterface[T]
	opts QueueOptions
}

// NewQueue returns an empty queue; Run works on it.
func NewQueue[T comparable](opts QueueOptions) *Queue[T] {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[T](opts.MinRetry, opts.MaxRetry)
	return &Queue[T]{q: workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[T]{}), opts: opts}
}

// Add queues item.
func (q *Queue[T]) Add(item T) { q.q.Add(item) }

// Len is how many items wait.
func (q *Queue[T]) Len() int { return q.q.Len() }

// Run works on the queue with workers goroutines until ctx ends, then
// shuts the queue down and returns once every worker has. process says
// whether the item is done; one not done, or failed (err, logged), is
// queued again after its back-off.
func (q *Queue[T]) Run(ctx context.Context, workers int, process func(ctx context.Context, item T) (done bool, err error)) {
	stop := context.AfterFunc(ctx, q.q.ShutDown)
	defer stop()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q.work(ctx, process) {
			}
		}()
	}
	wg.Wait()
	q.q.ShutDown()
}

// work works on one item; false once the queue is shut down.
func (q *Queue[T]) work(ctx context.Context, process func(context.Context, T) (bool, error)) bool {
	item, shutdown := q.q.Get()
	if shutdown {
		return false
	}
	defer q.q.Done(item)
	done, err := process(ctx, item)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		q.opts.Log.Warn(q.opts.Name+": will retry", "item", item, "err", err)
		q.q.AddRateLimited(item)
	case !done:
		q.q.AddRateLimited(item)
	default:
		q.q.Forget(item)
	}
	return true
}
