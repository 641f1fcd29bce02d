package bolt

import "context"

// CheckClaim implements ledger.Cluster: nil. The embedded ledger's file
// is opened for each transaction, so a claim that cannot write fails
// itself with the reason; there is no session whose rights could differ.
func (l *Ledger) CheckClaim(ctx context.Context) error { return ctx.Err() }
