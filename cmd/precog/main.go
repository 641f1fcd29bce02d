// Command precog runs batch prediction jobs: a Parquet or Postgres dataset
// through an ONNX model into Redis, Postgres and Parquet, resumably.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/open"
	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sinks"
)

// Exit codes, stable for scripts and tests.
const (
	exitOK          = 0
	exitFailed      = 1   // the run (or command) failed while executing
	exitInvalid     = 2   // bad spec, model, data schema or command line: nothing ran
	exitUnavailable = 75  // a store unreachable, the state dir or a sink target busy: retry later (EX_TEMPFAIL)
	exitInterrupted = 130 // Ctrl-C / SIGTERM: committed work is kept, rerun resumes
)

// invalidError marks an error found before any work started.
type invalidError struct{ err error }

func (e invalidError) Error() string { return e.err.Error() }
func (e invalidError) Unwrap() error { return e.err }

func invalid(err error) error {
	if err == nil {
		return nil
	}
	return invalidError{err}
}

type globals struct {
	stateDir string
	logLevel string
	logJSON  bool
	cpuProf  string
	log      *slog.Logger
	stopProf func()
	// interrupts is told by commands that run jobs what an interrupt means.
	interrupts *interrupts
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	// The first Ctrl-C / SIGTERM drains: in-flight shards are aborted and
	// released, committed ones kept. A second one kills at once.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, intr := watchInterrupts(context.Background(), sigs, func() { signal.Stop(sigs) }, os.Stderr)
	g := &globals{interrupts: intr}
	root := newRoot(g)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	intr.finish()
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(os.Stderr, "error:", err)
	var inv invalidError
	var refused *runner.RefusedError
	var locked *sinks.LockedError
	switch {
	case errors.Is(err, runner.ErrInterrupted) || errors.Is(err, context.Canceled):
		return exitInterrupted
	case errors.Is(err, sinks.ErrUnreachable) || errors.Is(err, ledger.ErrBusy) || errors.Is(err, open.ErrUnreachable) || errors.As(err, &locked):
		return exitUnavailable
	case errors.As(err, &inv) || errors.As(err, &refused):
		return exitInvalid
	}
	return exitFailed
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "precog",
		Short: "Batch predictions: a dataset through an ONNX model into Redis, Postgres and Parquet",
		Long: `precog runs batch prediction jobs described by a YAML job spec.

A job reads a dataset (Parquet files or a Postgres query), runs every row through
an ONNX model, and writes the predictions to Redis, Postgres and/or Parquet. Work
is split into shards recorded in a ledger: a run that is killed resumes where it
stopped, and readers only ever see a complete run (atomic publish).

Exit codes: 0 success, 1 run failed, 2 invalid input (nothing ran; do not retry),
75 unavailable (a store unreachable, the state dir or a sink target busy; retry
later), 130 interrupted (committed work kept; the same command resumes).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
				return invalid(fmt.Errorf("--log-level: %w", err))
			}
			opts := &slog.HandlerOptions{Level: lvl}
			if g.logJSON {
				g.log = slog.New(slog.NewJSONHandler(os.Stderr, opts))
			} else {
				g.log = slog.New(slog.NewTextHandler(os.Stderr, opts))
			}
			slog.SetDefault(g.log)
			if g.cpuProf != "" {
				f, err := os.Create(g.cpuProf)
				if err != nil {
					return invalid(fmt.Errorf("--cpu-profile: %w", err))
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					f.Close()
					return invalid(fmt.Errorf("--cpu-profile: %w", err))
				}
				g.stopProf = func() { pprof.StopCPUProfile(); f.Close() }
			}
			return nil
		},
		PersistentPostRun: func(*cobra.Command, []string) {
			if g.stopProf != nil {
				g.stopProf()
			}
		},
	}
	root.PersistentFlags().StringVar(&g.stateDir, "state-dir", envOr("PRECOG_STATE_DIR", ".precog"), "directory of the embedded ledger and rejects (env PRECOG_STATE_DIR)")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "debug, info, warn or error")
	root.PersistentFlags().BoolVar(&g.logJSON, "log-json", false, "logs as JSON lines")
	root.PersistentFlags().StringVar(&g.cpuProf, "cpu-profile", "", "write a Go CPU profile to this file (for performance reports)")
	// --version is `precog version`; not cobra's Version field, whose text
	// is fixed before the ONNX Runtime version can be known.
	var showVersion bool
	root.Flags().BoolVar(&showVersion, "version", false, "print the version, commit, Go and ONNX Runtime versions")
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		if showVersion {
			currentVersion().WriteText(cmd.OutOrStdout())
			return nil
		}
		return cmd.Help()
	}
	root.AddCommand(newVersionCmd(), newRunCmd(g), newValidateCmd(g), newInspectCmd(g), newBackfillCmd(g), newRollbackCmd(g), newServeCmd(g),
		newRunsCmd(g), newStatusCmd(g), newCancelCmd(g), newSubmitCmd(g), newRetryCmd(g), newWorkerCmd(g), newGCCmd(g), newScheduleCmd(g),
		newSchedulerCmd(g), newDashboardCmd(g), newPublishCmd(g), newDiffCmd(g), newWorkersCmd(g), newRejectsCmd(g))
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return invalid(err) })
	for _, c := range root.Commands() {
		if c.Args != nil {
			args := c.Args
			c.Args = func(cmd *cobra.Command, a []string) error { return invalid(args(cmd, a)) }
		}
	}
	return root
}

// runningJob makes an interrupt say that in-flight shards are released.
func (g *globals) runningJob() {
	if g.interrupts != nil {
		g.interrupts.SetMessage(msgInterruptRun)
	}
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
