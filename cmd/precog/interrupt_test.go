package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe to write from the watcher goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A command that completes normally prints no interrupt message, however
// its end races with the watcher (it used to print about 1 run in 17).
func TestNoInterruptMessageOnNormalExit(t *testing.T) {
	for i := range 2000 {
		var out syncBuffer
		sigs := make(chan os.Signal, 1)
		var released atomic.Int32
		ctx, in := watchInterrupts(context.Background(), sigs, func() { released.Add(1) }, &out)
		if i%2 == 0 {
			in.SetMessage(msgInterruptRun)
		}
		if in.finish() {
			t.Fatalf("iteration %d: finish reports an interrupt that never came", i)
		}
		if ctx.Err() == nil {
			t.Fatal("context not cancelled after finish")
		}
		// A signal after the command finished is not this command's.
		sigs <- os.Interrupt
		if got := out.String(); got != "" {
			t.Fatalf("iteration %d: printed %q on a normal exit", i, got)
		}
		if released.Load() == 0 {
			t.Fatal("signal delivery not released at finish")
		}
	}
}

func TestInterruptDuringRun(t *testing.T) {
	var out syncBuffer
	sigs := make(chan os.Signal, 1)
	var released atomic.Int32
	ctx, in := watchInterrupts(context.Background(), sigs, func() { released.Add(1) }, &out)
	in.SetMessage(msgInterruptRun)
	sigs <- os.Interrupt
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a signal did not cancel the command's context")
	}
	if released.Load() == 0 {
		t.Error("signal delivery not released after the first signal (a second Ctrl-C must kill)")
	}
	if !in.finish() {
		t.Error("finish does not report the interrupt")
	}
	if got := out.String(); got != msgInterruptRun+"\n" {
		t.Errorf("printed %q, want the run message once", got)
	}
}

// Commands that run no job (validate, inspect, serve) say they stop,
// not that shards are released.
func TestInterruptMessageOfOtherCommands(t *testing.T) {
	var out syncBuffer
	sigs := make(chan os.Signal, 1)
	ctx, in := watchInterrupts(context.Background(), sigs, func() {}, &out)
	sigs <- os.Interrupt
	<-ctx.Done()
	in.finish()
	if got := out.String(); strings.Contains(got, "shards") || !strings.Contains(got, "interrupted: stopping") {
		t.Errorf("printed %q", got)
	}
}
