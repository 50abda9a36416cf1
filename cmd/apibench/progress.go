package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// progress shows what the run is doing on stderr. On a terminal (mode
// auto) a status line is rewritten in place every 200 ms ("round 2/5
// create target=concord 3.1s 2345 ops"); otherwise (mode line) only the
// line of every finished window is printed. Mode none prints nothing.
type progress struct {
	out  io.Writer
	live bool
	off  bool

	mu     sync.Mutex
	label  string
	count  *atomic.Int64
	start  time.Time
	shown  bool
	stopc  chan struct{}
	stopWG sync.WaitGroup
}

func newProgress(out io.Writer, mode string) *progress {
	p := &progress{out: out, off: mode == "none", stopc: make(chan struct{})}
	if mode == "auto" {
		if f, ok := out.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				p.live = true
			}
		}
	}
	if p.live {
		p.stopWG.Add(1)
		go p.tick()
	}
	return p
}

func (p *progress) tick() {
	defer p.stopWG.Done()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stopc:
			return
		case <-t.C:
			p.mu.Lock()
			p.drawLocked()
			p.mu.Unlock()
		}
	}
}

func (p *progress) drawLocked() {
	if p.label == "" {
		return
	}
	line := fmt.Sprintf("%s %.1fs", p.label, time.Since(p.start).Seconds())
	if p.count != nil {
		line += fmt.Sprintf(" %d", p.count.Load())
	}
	fmt.Fprintf(p.out, "\r\x1b[K%s", line)
	p.shown = true
}

func (p *progress) clearLocked() {
	if p.shown {
		fmt.Fprint(p.out, "\r\x1b[K")
		p.shown = false
	}
}

// status sets what is going on now; count, when set, is shown after it.
func (p *progress) status(label string, count *atomic.Int64, start time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label, p.count, p.start = label, count, start
}

// done ends the current status with a line that stays.
func (p *progress) done(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label, p.count = "", nil
	if p.off {
		return
	}
	p.clearLocked()
	fmt.Fprintln(p.out, line)
}

// note prints a line that stays, above the status line.
func (p *progress) note(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.off {
		return
	}
	p.clearLocked()
	fmt.Fprintln(p.out, line)
}

func (p *progress) close() {
	if p.live {
		close(p.stopc)
		p.stopWG.Wait()
	}
	p.mu.Lock()
	p.clearLocked()
	p.mu.Unlock()
}
