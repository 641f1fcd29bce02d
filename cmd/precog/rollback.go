package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/runner"
	"github.com/precog-ml/precog/sinks"
)

func newRollbackCmd(g *globals) *cobra.Command {
	var (
		params []string
		to     string
		list   bool
	)
	cmd := &cobra.Command{
		Use:   "rollback JOB.yaml [--to VERSION]",
		Short: "Point readers back at an earlier published version (Redis current, Postgres view)",
		Long: `Move what readers see back to a retained published version, in one step per
store: Redis's {namespace}:current and the Postgres view are switched; the data
of both versions stays until retention removes it.

Without --to, rolls back to the newest retained version older than the current
one. Every store is checked to hold the target before any is changed. Parquet
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
				stores = append(stores, store{s.Name(), rb, cur, vs})
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
	return cmd
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
