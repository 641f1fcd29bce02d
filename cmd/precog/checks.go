package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/runner"
)

// newPublishCmd is `precog publish RUN --accept --reason TEXT`.
func newPublishCmd(g *globals) *cobra.Command {
	var (
		db, reason, by string
		accept         bool
	)
	cmd := &cobra.Command{
		Use:   "publish RUN --accept --reason TEXT",
		Short: "Publish a run held by its checks, recording who and why",
		Long: `A run whose checks failed (the spec's checks: block, on_failure: hold) is held:
nothing was published and its staged data is kept. publish --accept verifies
the staged data again and publishes it on every sink as a normal publish
would (Redis last), records who (--by, default $USER) and why (--reason) in
the ledger, and makes it the version later runs are checked against.
precog cancel RUN discards a held run instead. ` + ledgerHelp,
		Example: "  precog publish scores-20261101t040000-ab12 --accept --reason \"upstream dropped inactive users on purpose\"",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !accept {
				return invalid(errors.New("--accept is required: publish only publishes runs held by their checks, on purpose"))
			}
			if reason == "" {
				return invalid(errors.New("--reason is required: say why the failed checks are acceptable"))
			}
			if by == "" {
				by = runner.CurrentUser()
			}
			led, err := openLedger(cmd.Context(), g, db)
			if err != nil {
				return err
			}
			defer led.Close()
			r, err := runner.PublishHeld(cmd.Context(), runner.HeldOptions{Ledger: led.Store, RunID: args[0], By: by, Reason: reason, Log: g.log})
			switch {
			case errors.Is(err, ledger.ErrNotFound):
				return led.notFound(args[0])
			case err != nil && r.State != "" && r.State != jobs.RunHeld:
				return invalid(err)
			case err != nil:
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s %s (version %s published; accepted by %s)\n", r.ID, r.State, r.Version, by)
			return nil
		},
	}
	cmd.Flags().BoolVar(&accept, "accept", false, "publish the held run although its checks failed")
	cmd.Flags().StringVar(&reason, "reason", "", "why the failed checks are acceptable (recorded)")
	cmd.Flags().StringVar(&by, "by", "", "who accepts (default $USER)")
	addDBFlag(cmd, &db)
	return cmd
}

// newDiffCmd is `precog diff RUN [--against VERSION] [--json]`.
func newDiffCmd(g *globals) *cobra.Command {
	var (
		db, against string
		asJSON      bool
	)
	cmd := &cobra.Command{
		Use:   "diff RUN [--against VERSION]",
		Short: "The checks' report of a run: against the version it replaced, or another",
		Long: `Prints the report of the checks of the run's spec (checks: block): each check's
value, threshold and result, and for checks estimated from the key sample
their 95% error. Without --against: the report made before the run's publish
(or, if it has none yet, against the version now published to its target).
With --against VERSION (a version or run id of the same job): the same checks
between the two runs, held or not, e.g. two dates of a backfill or two model
versions. ` + ledgerHelp + `

Exit status: 0 when every check passed, 1 when a check failed (the report is
printed either way), 2 for a run or version that does not exist.`,
		Example: "  precog diff scores-20261101t040000-ab12\n  precog diff scores-20261101t040000-ab12 --against 20261031t040000-9f3c --json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			led, err := openLedger(cmd.Context(), g, db)
			if err != nil {
				return err
			}
			defer led.Close()
			rep, err := runner.Diff(cmd.Context(), led.Store, args[0], against)
			switch {
			case errors.Is(err, ledger.ErrNotFound) && against == "":
				return led.notFound(args[0])
			case err != nil:
				return invalid(err)
			}
			if asJSON {
				err = json.NewEncoder(cmd.OutOrStdout()).Encode(rep)
			} else {
				err = rep.WriteText(cmd.OutOrStdout())
			}
			if err == nil && !rep.Passed {
				err = fmt.Errorf("run %s: checks failed (the report above)", args[0]) // exit 1, as diff(1) when it finds differences
			}
			return err
		},
	}
	cmd.Flags().StringVar(&against, "against", "", "compare with this version (or run id) of the same job")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for machines")
	addDBFlag(cmd, &db)
	return cmd
}

// cancelHeld discards a held run (`precog cancel RUN` on a held run,
// runner.CancelHeld); held is false when the run is not held (cancel goes
// on as before).
func cancelHeld(ctx context.Context, g *globals, db, id string, w io.Writer) (held bool, err error) {
	led, err := openLedger(ctx, g, db)
	if err != nil {
		return false, nil // the ordinary path reports it
	}
	defer led.Close()
	r, held, err := runner.CancelHeld(ctx, runner.HeldOptions{Ledger: led.Store, RunID: id, By: runner.CurrentUser(), Reason: "precog cancel", Log: g.log})
	if held && err == nil {
		fmt.Fprintf(w, "run %s %s\n", r.ID, r.State)
	}
	return held, err
}
