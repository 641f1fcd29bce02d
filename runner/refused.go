package runner

// RefusedError is a request refused before anything changed because it
// cannot be done as asked (a usage or configuration error: an unknown
// sink, a version not retained, a run with nothing to retry). The command
// line maps it to exit 2; the dashboard shows its message.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// refused wraps err as a *RefusedError (nil stays nil).
func refused(err error) error {
	if err == nil {
		return nil
	}
	return &RefusedError{Err: err}
}
