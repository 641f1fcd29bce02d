package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sinks"
)

func newRollbackCmd(g *globals) *cobra.Command {
	var (
		params []string
		to     string
		list   bool
		db     string
	)
	cmd := &cobra.Command{
		Use:   "rollback JOB.yaml [--to VERSION]",
		Short: "Point readers back at an earlier published version (Redis current, Postgres view)",
		Long: `Move what readers see back to a retained published version, in one step per
store: Redis's {namespace}:current and the Postgres view are switched; the data
of both versions stays until retention removes it.

Without --to, rolls back to the newest retained version older than the current
one. Every store is checked to hold the target before any is changed. Rollback
holds every store's writer lock while it switches, and is refused while a run
of the job (same params) is publishing: in the Postgres ledger (--db or
PRECOG_DATABASE_URL) when one is named, else in the state directory's. Parquet
output keeps no earlier versions and is left as it is (re-run to rewrite it);
Postgres upsert mode cannot roll back.`,
		Example: `  precog rollback jobs/user-recs.yaml --list
  precog rollback jobs/user-recs.yaml
  precog rollback jobs/user-recs.yaml --to 20261121t080000-3f9a`,
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
			type store struct {
				sink     sinks.Sink
				name     string
				rb       sinks.Rollbacker
				current  string
				versions []string
			}
			var stores []store
			w := cmd.OutOrStdout()
			for _, s := range snks {
				rb, ok := s.(sinks.Rollbacker)
				if !ok || (s.Name() == "postgres" && spec.Sinks.Postgres.Mode == "upsert") {
					fmt.Fprintf(w, "%s: keeps no earlier versions; left as it is\n", s.Name())
					continue
				}
				vs, err := rb.Versions(ctx, info)
				if err != nil {
					return fmt.Errorf("sinks.%s: %w", s.Name(), err)
				}
				cur, err := rb.Current(ctx, info)
				if err != nil {
					return fmt.Errorf("sinks.%s: %w", s.Name(), err)
				}
				stores = append(stores, store{s, s.Name(), rb, cur, vs})
			}
			if len(stores) == 0 {
				return invalid(fmt.Errorf("%s: no sink of this job keeps versions to roll back to (redis publish: atomic, postgres mode: replace)", args[0]))
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
					return fmt.Errorf("sinks.%s: no retained version older than the current %s (retained: %s)", st.name, orNone(st.current), orNone(strings.Join(st.versions, ", ")))
				}
				target = st.versions[i+1]
			}
			for _, st := range stores {
				if !slices.Contains(st.versions, target) {
					return fmt.Errorf("sinks.%s: version %s is not retained (retained: %s); nothing was changed", st.name, target, orNone(strings.Join(st.versions, ", ")))
				}
			}
			// The publish is a critical section: hold every store's writer
			// lock (a publisher holds them from stage to cutover), then make
			// sure no run of this target is in its publish step.
			var rbSinks []sinks.Sink
			for _, st := range stores {
				rbSinks = append(rbSinks, st.sink)
			}
			release, err := lockForRollback(ctx, rbSinks, info)
			if err != nil {
				return err
			}
			defer release()
			if err := refuseWhilePublishing(ctx, g, db, spec); err != nil {
				return err
			}
			for _, st := range stores {
				if err := st.rb.Rollback(ctx, info, target); err != nil {
					return fmt.Errorf("sinks.%s: rollback to %s: %w", st.name, target, err)
				}
				fmt.Fprintf(w, "%s: %s → %s\n", st.name, orNone(st.current), target)
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&params, "param", nil, "run parameter k=v filling {{.k}} in the spec (repeatable)")
	cmd.Flags().StringVar(&to, "to", "", "version to roll back to (default: the one before the current)")
	cmd.Flags().BoolVar(&list, "list", false, "only list the current and retained versions of each store")
	addDBFlag(cmd, &db)
	return cmd
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
func lockForRollback(ctx context.Context, snks []sinks.Sink, info sinks.RunInfo) (release func(), err error) {
	var tok [4]byte
	_, _ = rand.Read(tok[:])
	holderInfo := info
	holderInfo.RunID = "rollback-" + hex.EncodeToString(tok[:])
	holder := sinks.ThisProcess(holderInfo)
	var held []sinks.Lock
	release = func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, l := range held {
			_ = l.Release(rctx)
		}
	}
	for _, s := range snks {
		l, err := s.Lock(ctx, info, holder)
		if err != nil {
			release()
			return nil, fmt.Errorf("sinks.%s: a run is writing this target; nothing was changed (roll back once it finished): %w", s.Name(), err)
		}
		held = append(held, l)
	}
	return release, nil
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
		path := filepath.Join(g.stateDir, "ledger.db")
		if _, err := os.Stat(path); err != nil {
			return nil // no embedded ledger: nothing ran here
		}
		l, err := bolt.Open(path)
		if errors.Is(err, ledger.ErrBusy) {
			return nil
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
