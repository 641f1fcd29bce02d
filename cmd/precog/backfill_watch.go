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

	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/runner/backfill"
)

// watchBackfill follows a backfill until it is done (backfill.Watch), as
// --watch follows a run: a redrawn table on a terminal, else one line (or
// JSON object) per change. Exit 0 when it succeeded, 1 otherwise
// (interrupted on the embedded ledger included), 2 when id names none.
func watchBackfill(ctx context.Context, read backfill.Reader, id string, w io.Writer, asJSON bool) error {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	_, err := backfill.Watch(ctx, read, id, backfill.FollowOptions{OnRead: func(v backfill.View, changed bool) {
		switch {
		case tty:
			var b strings.Builder
			_ = v.Table(&b)
			fmt.Fprint(w, "\033[H\033[2J"+b.String())
		case !changed:
		case asJSON:
			b, _ := json.Marshal(v)
			fmt.Fprintln(w, string(b))
		default:
			fmt.Fprintf(w, "%s %s values %d/%d done rows %d/%d rejected %d\n", time.Now().UTC().Format(time.RFC3339),
				v.State, v.Ended(), len(v.Dates), v.RowsDone, v.RowsTotal, v.Rejected)
		}
	}})
	if errors.Is(err, ledger.ErrNotFound) {
		return invalid(err)
	}
	return err
}
