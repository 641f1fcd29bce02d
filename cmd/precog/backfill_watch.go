package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/runner/backfill"
)

// backfillWatchEvery is how often `status BF --watch` reads the backfill.
const backfillWatchEvery = time.Second

// backfillRead is one read of a backfill for --watch: its view; found is
// false when the id names no backfill; executing is false when nothing can
// be moving it (an embedded ledger that no process holds).
type backfillRead func(ctx context.Context) (v backfill.View, found, executing bool, err error)

// clusterBackfillRead reads backfill id from the Postgres ledger, where
// the pool's workers move it.
func clusterBackfillRead(bl backfill.Ledger, id string) backfillRead {
	return func(ctx context.Context) (backfill.View, bool, bool, error) {
		v, _, err := backfill.Status(ctx, bl, id, time.Now())
		if errors.Is(err, ledger.ErrNotFound) {
			return v, false, true, nil
		}
		return v, err == nil, true, err
	}
}

// localBackfillRead reads backfill id from the embedded ledger under
// stateDir, opened for each read so that it never keeps a precog backfill
// from starting: while a process holds the ledger, from its snapshot.
func localBackfillRead(stateDir, id string) backfillRead {
	return func(ctx context.Context) (backfill.View, bool, bool, error) {
		led, err := open.Open(ctx, open.Location{StateDir: stateDir}, open.Options{})
		if errors.Is(err, ledger.ErrBusy) {
			s, ok := readSnapshot(stateDir)
			if !ok {
				return backfill.View{}, false, true, err
			}
			for _, b := range s.Backfills {
				if b.ID == id {
					return b, true, true, nil
				}
			}
			return backfill.View{}, false, true, nil
		}
		if err != nil {
			return backfill.View{}, false, false, err
		}
		defer led.Close()
		v, _, err := backfill.Status(ctx, led, id, time.Now())
		if errors.Is(err, ledger.ErrNotFound) {
			return v, false, false, nil
		}
		return v, err == nil, false, err
	}
}

// watchBackfill follows a backfill until it is done, as --watch follows a
// run: a redrawn table on a terminal, else one line (or JSON object) per
// change. Done is a terminal state (exit 0 when succeeded, 1 otherwise),
// or, on the embedded ledger, no process holding it while it is open (it
// is interrupted: the backfill command resumes it; exit 1).
func watchBackfill(ctx context.Context, read backfillRead, id string, w io.Writer, asJSON bool) error {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	last := ""
	for {
		v, found, executing, err := read(ctx)
		if err != nil {
			return err
		}
		if !found {
			return invalid(fmt.Errorf("backfill %s: not found", id))
		}
		printBackfillChange(w, v, &last, asJSON, tty)
		state := jobs.RunState(v.State)
		switch {
		case state == jobs.RunSucceeded:
			return nil
		case state.Terminal():
			return fmt.Errorf("backfill %s %s: %s", v.ID, v.State, v.Error)
		case !executing:
			return fmt.Errorf("backfill %s is interrupted: no precog process is running it; rerun the precog backfill command to resume it", v.ID)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backfillWatchEvery):
		}
	}
}

// printBackfillChange prints v when it changed since last (the clock's
// fields aside); a terminal redraws it every time.
func printBackfillChange(w io.Writer, v backfill.View, last *string, asJSON, tty bool) {
	c := v
	c.DurationS, c.RowsPerS, c.ETAS = 0, 0, 0
	c.Dates = append([]backfill.Date(nil), v.Dates...)
	for i := range c.Dates {
		c.Dates[i].DurationS = 0
	}
	key, _ := json.Marshal(c)
	switch {
	case tty:
		var b strings.Builder
		_ = v.Table(&b)
		fmt.Fprint(w, "\033[H\033[2J"+b.String())
	case !changed(last, string(key)):
	case asJSON:
		b, _ := json.Marshal(v)
		fmt.Fprintln(w, string(b))
	default:
		done := 0
		for _, d := range v.Dates {
			if jobs.RunState(d.State).Terminal() {
				done++
			}
		}
		fmt.Fprintf(w, "%s %s values %d/%d done rows %d/%d rejected %d\n", time.Now().UTC().Format(time.RFC3339),
			v.State, done, len(v.Dates), v.RowsDone, v.RowsTotal, v.Rejected)
	}
}
