package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/runview"
	"github.com/precog-ml/precog/runner"
)

// workerJSON is one worker as `precog workers --json` prints it.
type workerJSON struct {
	ledger.WorkerInfo
	LeaseS        float64 `json:"lease_s"`
	HeartbeatAgeS float64 `json:"heartbeat_age_s"`
	// State is WorkerInfo.State.
	State string `json:"state"`
}

func newWorkersCmd(g *globals) *cobra.Command {
	var (
		pool   string
		asJSON bool
		db     string
	)
	cmd := &cobra.Command{
		Use:   "workers [--pool P] [--json]",
		Short: "The workers of the ledger: pool, devices, version, last heartbeat, current shards; lost ones marked",
		Long: `The workers registered in the ledger, by pool then id: their devices, binary
version, loaded models, start time, last heartbeat and the shards they hold.

Workers register with their first heartbeat, heartbeat every third of their
lease and leave the list when they stop cleanly (SIGTERM). A worker that has
not heartbeated for one lease (killed, frozen, cut off) is shown as lost, and
its shards as expiring: any other worker of the pool takes them over once their
leases end. Lost workers are forgotten after a day.

` + ledgerHelp + `

A worker that cannot execute a run (its spec, model or sinks do not load
there: a variable not set, a model file missing) gives its shard back without
spending an attempt and passes over that run, retrying after a backoff; it is
listed under the table with the reason, and its /readyz fails.

--json prints an array of {id, pool, devices, version, model_cache, current:
[{run, shard, device}], unable: [{run, job, reason, since}] (absent when
none), started_at, heartbeat_at, heartbeat_age_s, lease_s, lost, state}.`,
		Example: "  precog workers --db postgres://precog@db/precog\n  precog workers --pool gpu --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if pool != "" {
				if err := jobs.ValidatePool(pool); err != nil {
					return invalid(fmt.Errorf("--pool: %w", err))
				}
			}
			led, err := openLedger(ctx, g, db)
			if err != nil {
				return err
			}
			defer led.Close()
			ws, err := runner.ListWorkers(ctx, led, pool)
			if err != nil {
				return err
			}
			if asJSON {
				return writeWorkersJSON(cmd.OutOrStdout(), ws)
			}
			return writeWorkers(cmd.OutOrStdout(), ws)
		},
	}
	cmd.Flags().StringVar(&pool, "pool", "", "only this pool's workers")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for machines")
	addDBFlag(cmd, &db)
	return cmd
}

func writeWorkersJSON(out io.Writer, ws []ledger.WorkerInfo) error {
	arr := make([]workerJSON, 0, len(ws))
	for _, w := range ws {
		if w.Current == nil {
			w.Current = []ledger.ShardRef{}
		}
		arr = append(arr, workerJSON{WorkerInfo: w, LeaseS: w.Lease.Seconds(), HeartbeatAgeS: w.HeartbeatAge.Seconds(), State: w.State()})
	}
	return json.NewEncoder(out).Encode(arr)
}

func writeWorkers(out io.Writer, ws []ledger.WorkerInfo) error {
	if len(ws) == 0 {
		_, err := fmt.Fprintln(out, "no workers registered (start one: precog worker --pool POOL)")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tPOOL\tSTATE\tDEVICES\tVERSION\tHEARTBEAT\tUP\tSHARDS\tMODELS")
	for _, w := range ws {
		state, beat := w.State(), runview.Duration(max(w.HeartbeatAge, time.Millisecond))+" ago"
		var held []string
		for _, c := range w.Current {
			h := fmt.Sprintf("%s#%d", c.Run, c.Shard)
			if w.Lost {
				h += " (expiring)"
			}
			held = append(held, h)
		}
		if w.Lost {
			state = fmt.Sprintf("LOST (no heartbeat for %s, lease %s)", runview.Duration(w.HeartbeatAge), runview.Duration(w.Lease))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", w.ID, w.Pool, state, strings.Join(w.Devices, ","), dash(w.Version), beat,
			runview.Duration(w.HeartbeatAt.Sub(w.StartedAt)+w.HeartbeatAge),
			dash(strings.Join(held, ", ")), dash(w.ModelCache))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, w := range ws {
		for _, u := range w.Unable {
			if _, err := fmt.Fprintf(out, "%s cannot run %s (job %s) since %s, passes over its shards: %s\n",
				w.ID, u.Run, u.Job, u.Since.UTC().Format(time.RFC3339), u.Reason); err != nil {
				return err
			}
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// warnNoWorkers warns on stderr when no worker of pool heartbeated within
// its lease (ledger.Unattended).
func warnNoWorkers(ctx context.Context, led ledger.Store, pool string, stderr io.Writer, log *slog.Logger) {
	none, lost, err := ledger.Unattended(ctx, led, pool)
	if err != nil {
		log.Debug("list workers", "err", err)
	} else if none {
		fmt.Fprintf(stderr, "warning: no worker of pool %q has heartbeated within its lease (%d lost): the run waits until one starts (precog worker --pool %s; precog workers lists them)\n", pool, lost, pool)
	}
}
