package main

import (
	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/internal/buildinfo"
	"github.com/precog-ml/precog/runner/model"
)

// currentVersion is what `precog version` and --version print.
func currentVersion() buildinfo.Info {
	return buildinfo.Current(buildinfo.Runtime{Version: model.RuntimeVersion, Library: model.LibraryPath()})
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print precog's version, commit, Go version and the ONNX Runtime version (also --version)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			currentVersion().WriteText(cmd.OutOrStdout())
			return nil
		},
	}
}
