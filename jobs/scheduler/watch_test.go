package scheduler

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatch: a new file in the directory reloads once its stamp changes,
// a value on Hup reloads, and Watch returns when its context ends.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	src := Dir{Path: dir}
	reloads := make(chan struct{}, 16)
	hup := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// The first stamp is taken before the file is written.
	first := make(chan struct{})
	var n int
	stamp := func() string {
		if n++; n == 1 {
			defer close(first)
		}
		return src.Stamp()
	}
	go func() {
		defer close(done)
		Watch(ctx, WatchParams{Stamp: stamp, Reload: func() { reloads <- struct{}{} }, Every: 5 * time.Millisecond, Hup: hup})
	}()
	wait := func(what string) {
		t.Helper()
		select {
		case <-reloads:
		case <-time.After(time.Minute):
			t.Fatalf("no reload after %s", what)
		}
	}
	<-first
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("name: a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wait("a new spec file")
	hup <- os.Interrupt
	wait("a hangup")
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Watch did not return after its context ended")
	}
	if n := len(reloads); n != 0 {
		t.Errorf("%d reloads beyond the two changes", n)
	}
}
