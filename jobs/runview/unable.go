package runview

import (
	"fmt"

	"github.com/precog-ml/precog/jobs/ledger"
)

// UnableFor lists the live workers that cannot execute run, with why
// ("host-a-12: spec: ${DATABASE_URL} is not set"): a run no worker can
// execute waits, and its status says why.
func UnableFor(run string, list []ledger.WorkerInfo) []string {
	var out []string
	for _, w := range list {
		if w.Lost {
			continue
		}
		for _, u := range w.Unable {
			if u.Run == run {
				out = append(out, fmt.Sprintf("%s: %s", w.ID, oneLine(u.Reason, 300)))
			}
		}
	}
	return out
}
