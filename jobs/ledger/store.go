package ledger

import "fmt"

// Store is the whole ledger contract: what the embedded ledger (bolt) and
// the Postgres ledger both implement, and what consumers take, so that no
// consumer asks at run time what its ledger can do. A backend that cannot
// do a thing still has the method: it returns an error wrapping
// ErrUnsupported (see Unsupported), changes nothing, and the consumer
// checks errors.Is(err, ErrUnsupported) where it once checked a type
// assertion. Both backends pass ledgertest.Exercise.
type Store interface {
	Cluster
	Checks
	Cleanups
	Workers
	Rejects
	Backfills
	Scheduler
	Snapshots
}

// Unsupported is the error of a backend that cannot do op: ErrUnsupported
// wrapped with which backend and why, so that the message tells an
// operator what happens instead.
func Unsupported(backend, op, why string) error {
	return fmt.Errorf("%s: %w (the %s ledger: %s)", op, ErrUnsupported, backend, why)
}
