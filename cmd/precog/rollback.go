package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sinks"
)

func newRollbackCmd(g *globals) *cobra.Command {
	var (
		params    []string
		to        string
		list      bool
		db        string
		onlySinks []string
	)
	cmd := &cobra.Command{
		Use:   "rollback JOB.yaml [--to VERSION] [--sinks redis,postgres]",
		Short: "Point readers back at an earlier published version in every sink (Redis current, Postgres view, Parquet directory)",
		Long: `Move what readers see back to a retained published version, in one step per
store: Redis's {namespace}:current and the Postgres view are switched, and the
Parquet target directory is swapped with the retained copy of that version
(kept beside it in .<dir>.precog.versions/). The data of both versions stays
until retention (each sink's retain, default 2) removes it.

Without --to, rolls back to the newest retained version older than the current
one. Every store is checked to hold the target before any is changed: a sink
that no longer retains it, or keeps no earlier versions at all (Postgres
mode: upsert, Redis publish: in_place), makes rollback refuse with exit 2,
naming the sink, and nothing changes. --sinks names the sinks to move when
you accept leaving the others where they are (the stores then serve
different versions until the next run publishes). Rollback holds every
store's writer lock while it switches, and is refused while a run of the
job (same params) is publishing: in the Postgres ledger (--db or
PRECOG_DATABASE_URL) when one is named, else in the state directory's.`,
		Example: `  precog rollback jobs/user-recs.yaml --list
  precog rollback jobs/user-recs.yaml
  precog rollback jobs/user-recs.yaml --to 20261121t080000-3f9a
  precog rollback jobs/user-recs.yaml --sinks redis,postgres`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			spec, err := loadSpec(args[0], params)
			if err != nil {
				return err
			}
			snks, err := runner.OpenSinks(ctx, spec)
			if err != nil {
				return invalid(err)
			}
			defer func() {
				for _, s := range snks {
					s.Close()
				}
			}()
			info := sinks.RunInfo{Job: spec.Name, Params: spec.Params, Key: spec.Source.Key}
			w := cmd.OutOrStdout()
			stores, err := rollbackStores(ctx, spec, snks, info, onlySinks, list, w)
			if err != nil {
				return err
			}
			if list {
				for _, st := range stores {
					fmt.Fprintf(w, "%s: current %s; retained (newest first): %s\n", st.name, orNone(st.current), orNone(strings.Join(st.versions, ", ")))
				}
				return nil
			}
			target := to
			if target == "" {
				// The store applications read decides: Redis when present.
				st := stores[len(stores)-1]
				i := slices.Index(st.versions, st.current)
				if i < 0 || i+1 >= len(st.versions) {
					return invalid(fmt.Errorf("sinks.%s: no retained version older than the current %s (retained: %s); nothing was changed", st.name, orNone(st.current), orNone(strings.Join(st.versions, ", "))))
				}
				target = st.versions[i+1]
			}
			for _, st := range stores {
				if !slices.Contains(st.versions, target) {
					return invalid(fmt.Errorf("sinks.%s: version %s is not retained (retained: %s); nothing was changed (move only the other sinks with --sinks, leaving %s where it is)", st.name, target, orNone(strings.Join(st.versions, ", ")), st.name))
				}
			}
			// The publish is a critical section: hold every store's writer
			// lock (a publisher holds them from stage to cutover), then make
			// sure no run of this target is in its publish step.
			var rbSinks []sinks.Sink
			for _, st := range stores {
				rbSinks = append(rbSinks, st.sink)
			}
			lctx, release, err := lockForRollback(ctx, rbSinks, info)
			if err != nil {
				return err
			}
			defer release()
			if err := refuseWhilePublishing(lctx, g, db, spec); err != nil {
				return err
			}
			return switchStores(lctx, stores, info, target, w)
		},
	}
	cmd.Flags().StringArrayVar(&params, "param", nil, "run parameter k=v filling {{.k}} in the spec (repeatable)")
	cmd.Flags().StringVar(&to, "to", "", "version to roll back to (default: the one before the current)")
	cmd.Flags().BoolVar(&list, "list", false, "only list the current and retained versions of each store")
	cmd.Flags().StringSliceVar(&onlySinks, "sinks", nil, "move only these sinks (comma-separated: parquet, postgres, redis), leaving the others on their version")
	addDBFlag(cmd, &db)
	return cmd
}

// rollbackStore is one sink a rollback moves.
type rollbackStore struct {
	sink     sinks.Sink
	name     string
	rb       sinks.Rollbacker
	current  string
	versions []string
}

// rollbackStores lists the sinks to move with their current and retained
// versions: every sink of the job, or those --sinks names. A sink that
// keeps no earlier versions is a usage error (exit 2) unless --sinks
// leaves it out (with list, it is only said).
func rollbackStores(ctx context.Context, spec *jobs.Spec, snks []sinks.Sink, info sinks.RunInfo, only []string, list bool, w io.Writer) ([]rollbackStore, error) {
	names := make([]string, 0, len(snks))
	for _, s := range snks {
		names = append(names, s.Name())
	}
	for _, n := range only {
		if !slices.Contains(names, n) {
			return nil, invalid(fmt.Errorf("--sinks: %q is not a sink of job %s (its sinks: %s)", n, spec.Name, strings.Join(names, ", ")))
		}
	}
	var stores []rollbackStore
	for _, s := range snks {
		if len(only) > 0 && !slices.Contains(only, s.Name()) {
			fmt.Fprintf(w, "%s: left as it is (not in --sinks)\n", s.Name())
			continue
		}
		rb, ok := s.(sinks.Rollbacker)
		if (!ok || !keepsVersions(spec, s.Name())) && list {
			fmt.Fprintf(w, "%s: keeps no earlier versions\n", s.Name())
			continue
		}
		if !ok || !keepsVersions(spec, s.Name()) {
			return nil, invalid(fmt.Errorf("sinks.%s keeps no earlier versions (postgres mode: upsert, redis publish: in_place), so a rollback would leave the stores on different versions; nothing was changed (name the sinks to move with --sinks to roll back the others anyway)", s.Name()))
		}
		vs, err := rb.Versions(ctx, info)
		if err != nil {
			return nil, fmt.Errorf("sinks.%s: %w", s.Name(), err)
		}
		cur, err := rb.Current(ctx, info)
		if err != nil {
			return nil, fmt.Errorf("sinks.%s: %w", s.Name(), err)
		}
		stores = append(stores, rollbackStore{s, s.Name(), rb, cur, vs})
	}
	if len(stores) == 0 {
		return nil, invalid(errors.New("--sinks: no sink left to roll back"))
	}
	return stores, nil
}

// keepsVersions reports whether the spec's sink named name keeps earlier
// published versions.
func keepsVersions(spec *jobs.Spec, name string) bool {
	switch name {
	case "postgres":
		return spec.Sinks.Postgres.Mode != jobs.PostgresUpsert
	case "redis":
		return spec.Sinks.Redis.Publish != jobs.RedisPublishInPlace
	}
	return true
}

// switchStores moves every store to target, in the sinks' order (Redis
// last). When one fails, those already moved are moved back to the
// version they had, so that the stores never end on different versions;
// the error says what happened.
func switchStores(ctx context.Context, stores []rollbackStore, info sinks.RunInfo, target string, w io.Writer) error {
	for i, st := range stores {
		if err := ctx.Err(); err != nil {
			return undoRollback(stores[:i], info, fmt.Errorf("sinks.%s: not rolled back: %w", st.name, context.Cause(ctx)), w)
		}
		if err := st.rb.Rollback(ctx, info, target); err != nil {
			return undoRollback(stores[:i], info, fmt.Errorf("sinks.%s: rollback to %s: %w", st.name, target, err), w)
		}
		fmt.Fprintf(w, "%s: %s → %s\n", st.name, orNone(st.current), target)
	}
	return nil
}

// undoRollback moves the stores a failed rollback moved back to their
// version before it, and returns cause with what it did.
func undoRollback(moved []rollbackStore, info sinks.RunInfo, cause error, w io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, st := range slices.Backward(moved) {
		if st.current == "" {
			continue
		}
		if err := st.rb.Rollback(ctx, info, st.current); err != nil {
			errs = append(errs, fmt.Errorf("sinks.%s: could not move back to %s: %w", st.name, st.current, err))
			continue
		}
		fmt.Fprintf(w, "%s: moved back to %s\n", st.name, st.current)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w; undoing the sinks already moved failed, the stores may be on different versions: %w", cause, errors.Join(errs...))
	}
	if len(moved) > 0 {
		return fmt.Errorf("%w; the sinks already moved were moved back", cause)
	}
	return fmt.Errorf("%w; nothing was changed", cause)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// lockForRollback takes the writer lock of every sink it switches, as a
// holder of its own (a rollback is no run: it never takes over a run's
// lock). A target being written is a *sinks.LockedError naming the writer.
// The returned context is cancelled when any lock is lost (its lease
// lapsed or was taken over): the rollback stops before the next sink.
func lockForRollback(ctx context.Context, snks []sinks.Sink, info sinks.RunInfo) (context.Context, func(), error) {
	var tok [4]byte
	_, _ = rand.Read(tok[:])
	holderInfo := info
	holderInfo.RunID = "rollback-" + hex.EncodeToString(tok[:])
	lctx, release, err := runner.LockSinks(ctx, snks, info, sinks.ThisProcess(holderInfo))
	if err != nil {
		return nil, nil, fmt.Errorf("a run is writing this target; nothing was changed (roll back once it finished): %w", err)
	}
	return lctx, release, nil
}

// refuseWhilePublishing fails when a run of spec's job and params is in
// its publish step in the ledger: rolling back under it would leave the
// stores on different versions once it cuts over. The embedded ledger
// held by a running precog run is skipped (that process holds the stores'
// writer locks while it publishes).
func refuseWhilePublishing(ctx context.Context, g *globals, db string, spec *jobs.Spec) error {
	var led ledger.Ledger
	if dsn := databaseURL(db); dsn != "" {
		l, err := openCluster(ctx, dsn, cliLedgerOptions(g.log))
		if err != nil {
			return err
		}
		led = l
	} else {
		l, err := open.Open(ctx, open.Location{StateDir: g.stateDir}, open.Options{Existing: true})
		if errors.Is(err, open.ErrNoLedger) || errors.Is(err, ledger.ErrBusy) {
			return nil // no embedded ledger (nothing ran here), or a running precog run holds it
		} else if err != nil {
			return err
		}
		led = l
	}
	defer led.Close()
	run, err := led.OpenRun(ctx, spec.Name, jobs.ParamsKey(spec.Params))
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return nil
	case err != nil:
		return err
	case run.State == jobs.RunPublishing:
		return fmt.Errorf("run %s of %s is publishing; nothing was changed (roll back once it finished, see precog status %s): %w", run.ID, spec.Name, run.ID, ledger.ErrPublishing)
	}
	return nil
}
