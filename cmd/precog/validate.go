package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/runner/backfill"
	"github.com/precog-ml/precog/runner/model"
)

func newValidateCmd(g *globals) *cobra.Command {
	var (
		params    []string
		maxShards int
		estimate  bool
	)
	cmd := &cobra.Command{
		Use:   "validate JOB.yaml [--param k=v]...",
		Short: "Check a job without running it: spec, model I/O vs source schema, sinks; print the shard plan",
		Long: `Check everything that can be checked without computing a prediction:

  - the spec (unknown fields, types, ranges, ${ENV} variables, {{.param}} templates);
  - the model: every input and output the spec names exists with a supported type,
    and static dimensions match the column counts;
  - the source: files readable, key and input columns present with numeric types;
  - the sinks: reachable with the configured credentials;
  - on device cuda:N, whether the model is large enough for a GPU: a warning
    when its estimated FLOPs per row are too few to beat the same machine's CPU.

Then print what the device chose (rows per inference call, sessions, shards in
flight by default) and the shard plan (from file metadata only: no data is read).
--estimate then probes the model on a short real sample at the spec's batch
size and prints the estimated wall time of the run, as backfill --dry-run does.`,
		Example: `  precog validate jobs/user-recs.yaml
  precog validate jobs/scores.yaml --param date=2026-11-01`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := loadSpec(args[0], params)
			if err != nil {
				return err
			}
			// Before the checks: said even where the device is missing.
			warnSmallModel(cmd.ErrOrStderr(), spec)
			c, err := runner.CheckJob(cmd.Context(), spec)
			if err != nil {
				return err
			}
			defer c.Close()
			job, plans := c.Job, c.Plans
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "job %s: valid\n", spec.Name)
			fmt.Fprintf(w, "model %s (version %s)\n", spec.Model.Path, job.Model.Version())
			fmt.Fprintf(w, "on %s: %d rows a call, %d sessions, %d shards in flight here by default (precog run --parallel 0)\n",
				spec.Model.Device, job.Model.BatchRows(), job.Model.Sessions(), runner.DefaultParallel(spec.Model.Device, 1))
			printText(w, job.Model)
			fmt.Fprintf(w, "output schema:\n")
			for _, f := range job.Output.Fields() {
				fmt.Fprintf(w, "  %-16s %s\n", f.Name, f.Type)
			}
			var total int64
			for _, p := range plans {
				total += p.Rows
			}
			fmt.Fprintf(w, "shard plan: %d shards, %d rows (rows_per_shard %d, batch_size %d)\n",
				len(plans), total, spec.Source.RowsPerShard, job.Model.BatchRows())
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "  SHARD\tROWS\tSOURCE")
			for i, p := range plans {
				if maxShards > 0 && i >= maxShards {
					fmt.Fprintf(tw, "  …\t\t%d more shards\n", len(plans)-i)
					break
				}
				fmt.Fprintf(tw, "  %d\t%d\t%s\n", i, p.Rows, p.Desc)
			}
			tw.Flush()
			if len(plans) == 0 {
				fmt.Fprintln(w, "note: the dataset has zero rows; a run would publish an empty result")
			}
			if estimate && len(plans) > 0 {
				return backfill.WriteEstimate(cmd.Context(), w, backfill.EstimateParams{Spec: spec, Plans: plans, Rows: total, Runs: 1, Shards: len(plans), Parallel: 1, StateDir: g.stateDir})
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&params, "param", nil, "run parameter k=v filling {{.k}} in the spec (repeatable)")
	cmd.Flags().BoolVar(&estimate, "estimate", false, "probe the model on a real sample of rows and estimate the run's wall time, as backfill --dry-run does for each partition")
	cmd.Flags().IntVar(&maxShards, "max-shards", 50, "print at most this many shards of the plan (0: all)")
	return cmd
}

func newInspectCmd(_ *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect MODEL.onnx",
		Short: "Show a model's inputs and outputs: names, element types, shapes",
		Long: `Show what an ONNX model expects and produces, to write the model section of a
job spec: each input needs a "columns:" or "column:" mapping; each output you
want stored needs a field name. Dimensions shown as N are dynamic (the batch).`,
		Example: `  precog inspect models/recs.onnx`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := model.Inspect(args[0])
			if err != nil {
				return invalid(err)
			}
			fmt.Fprint(cmd.OutOrStdout(), info.String())
			return nil
		},
	}
}
