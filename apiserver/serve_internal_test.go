package apiserver

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestWatchAbortReachesNetHTTP: a watch is served on a goroutine of its own
// until it parks; a handler that aborts it (http.ErrAbortHandler) still
// makes net/http cut the response off, as on its own goroutine, and the
// watch is no longer counted.
func TestWatchAbortReachesNetHTTP(t *testing.T) {
	watches := &sync.WaitGroup{}
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) })
	h := &Handler{rc: withRequestContext(next, slog.New(slog.DiscardHandler), time.Minute, nil, nil, watches), watches: watches}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/v1/configmaps?watch=true")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("an aborted watch answered %d; want its response cut off", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.WaitWatches(ctx); err != nil {
		t.Errorf("the aborted watch is still counted: %v", err)
	}
}
