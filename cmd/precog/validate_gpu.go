package main

import (
	"fmt"
	"io"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner/model"
)

// warnSmallModel prints validate's warning about a model too small to gain
// from the GPU its spec asks for. An unreadable model is left to the checks
// that follow, which report it as the error it is.
func warnSmallModel(w io.Writer, spec *jobs.Spec) {
	if msg, err := model.SmallModelWarning(spec.Model); err == nil && msg != "" {
		fmt.Fprintln(w, "warning: "+msg)
	}
}
