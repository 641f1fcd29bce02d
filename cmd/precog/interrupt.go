package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
)

// Interrupt messages: a run keeps its committed shards; other commands just
// stop.
const (
	msgInterruptRun   = "\ninterrupted: releasing in-flight shards (committed work is kept; press Ctrl-C again to exit at once)"
	msgInterruptOther = "\ninterrupted: stopping (press Ctrl-C again to exit at once)"
)

// interrupts turns the first signal received during a command into a
// cancelled context and one message on w. Only a signal that arrives before
// finish is called counts: a command that completes normally prints nothing
// (the message used to race with the context's cancellation at exit).
type interrupts struct {
	cancel  context.CancelFunc
	release func() // stops signal delivery, so a second signal kills at once
	done    chan struct{}
	exited  chan struct{}

	mu          sync.Mutex
	message     string
	finished    bool
	interrupted bool
}

// watchInterrupts returns a context cancelled by the first value on sigs;
// release is called then (and at finish) to restore the default signal
// action. The message printed is msgInterruptOther until SetMessage.
func watchInterrupts(parent context.Context, sigs <-chan os.Signal, release func(), w io.Writer) (context.Context, *interrupts) {
	ctx, cancel := context.WithCancel(parent)
	in := &interrupts{cancel: cancel, release: release, done: make(chan struct{}), exited: make(chan struct{}), message: msgInterruptOther}
	go func() {
		defer close(in.exited)
		select {
		case <-sigs:
		case <-in.done:
			return
		}
		in.mu.Lock()
		if in.finished {
			in.mu.Unlock()
			return
		}
		in.interrupted = true
		msg := in.message
		in.mu.Unlock()
		in.release()
		fmt.Fprintln(w, msg)
		cancel()
	}()
	return ctx, in
}

// SetMessage sets what an interrupt prints from now on.
func (in *interrupts) SetMessage(msg string) {
	in.mu.Lock()
	in.message = msg
	in.mu.Unlock()
}

// finish ends the watch: a signal from now on is not this command's. It
// waits until a message being printed is out, and reports whether the
// command was interrupted.
func (in *interrupts) finish() bool {
	in.mu.Lock()
	in.finished = true
	in.mu.Unlock()
	close(in.done)
	<-in.exited
	in.release()
	in.cancel()
	return in.interrupted
}
