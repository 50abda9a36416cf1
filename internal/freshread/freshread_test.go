package freshread_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concord-dev/concord/internal/freshread"
)

// TestCallersShareTheNextRead: callers arriving while a read is out share
// one next read, sent after they asked, never the one already out.
func TestCallersShareTheNextRead(t *testing.T) {
	var sent atomic.Int64
	release := make(chan struct{})
	r := freshread.New(func() (int64, error) {
		n := sent.Add(1)
		if n == 1 {
			<-release
		}
		return n, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := make(chan int64)
	go func() { v, _ := r.Read(ctx); first <- v }()
	for deadline := time.Now().Add(5 * time.Second); sent.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first read was not sent")
		}
	}
	// Ten callers arrive while read 1 is out: they must get read 2.
	var wg sync.WaitGroup
	got := make([]int64, 10)
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], _ = r.Read(ctx) }()
	}
	time.Sleep(20 * time.Millisecond) // let them queue behind read 1
	close(release)
	if v := <-first; v != 1 {
		t.Errorf("the first caller got read %d; want 1", v)
	}
	wg.Wait()
	for i, v := range got {
		if v != 2 {
			t.Errorf("caller %d got read %d; want 2 (the one sent after it asked)", i, v)
		}
	}
	if n := sent.Load(); n != 2 {
		t.Errorf("%d reads sent; want 2", n)
	}
}

// TestCallerDeadline: a caller whose context ends stops waiting; the read
// goes on and answers the others, errors included.
func TestCallerDeadline(t *testing.T) {
	release := make(chan struct{})
	failed := errors.New("etcd refused")
	r := freshread.New(func() (int, error) { <-release; return 0, failed })
	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := r.Read(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Read after the deadline = %v; want context.DeadlineExceeded", err)
	}
	patient := make(chan error)
	go func() { _, err := r.Read(context.Background()); patient <- err }()
	close(release)
	select {
	case err := <-patient:
		if !errors.Is(err, failed) {
			t.Errorf("Read = %v; want the read's error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting caller was not answered")
	}
}
