package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/precog-ml/precog/runner/model"
)

// Set with -ldflags "-X main.version=v1.2.3 -X main.commit=abc123" by
// release builds; otherwise taken from the Go build info.
var (
	version = ""
	commit  = ""
)

// versionInfo is what `precog --version` reports.
type versionInfo struct {
	Version   string // release version, or (devel)
	Commit    string // VCS revision, "+dirty" when built from a modified tree
	BuildTime string // VCS commit time, when known
	Go        string
	ORT       string // ONNX Runtime version, or "not loaded: <reason>"
}

// buildVersion fills versionInfo from the ldflags variables, then bi (nil
// when the binary has no build info), then ortVersion.
func buildVersion(bi *debug.BuildInfo, ortVersion func() (string, error)) versionInfo {
	v := versionInfo{Version: version, Commit: commit, Go: runtime.Version()}
	if bi != nil {
		if v.Version == "" && bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				v.BuildTime = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if v.Commit == "" && rev != "" {
			v.Commit = rev
			if modified == "true" {
				v.Commit += "+dirty"
			}
		}
	}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	if ort, err := ortVersion(); err != nil {
		v.ORT = "not loaded: " + err.Error()
	} else {
		v.ORT = ort
	}
	return v
}

func (v versionInfo) print(w io.Writer) {
	fmt.Fprintf(w, "precog %s\n", v.Version)
	fmt.Fprintf(w, "  commit:       %s\n", v.Commit)
	if v.BuildTime != "" {
		fmt.Fprintf(w, "  commit time:  %s\n", v.BuildTime)
	}
	fmt.Fprintf(w, "  go:           %s\n", v.Go)
	fmt.Fprintf(w, "  onnx runtime: %s (%s)\n", v.ORT, model.LibraryPath())
}

func currentVersion() versionInfo {
	bi, _ := debug.ReadBuildInfo()
	return buildVersion(bi, model.RuntimeVersion)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print precog's version, commit, Go version and the ONNX Runtime version (also --version)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			currentVersion().print(cmd.OutOrStdout())
			return nil
		},
	}
}

// workerVersion is the version a worker reports in the ledger's worker
// list: the release version and, when known, the commit.
func workerVersion() string {
	bi, _ := debug.ReadBuildInfo()
	v := buildVersion(bi, func() (string, error) { return "", nil })
	if v.Commit != "" && v.Commit != "unknown" {
		return v.Version + " (" + v.Commit[:min(len(v.Commit), 12)] + ")"
	}
	return v.Version
}
