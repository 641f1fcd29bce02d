//go:build !linux

package parquet

import "errors"

// errNoExchange: the filesystem cannot swap two paths atomically.
var errNoExchange = errors.New("atomic exchange unsupported")

// exchange is unavailable here; Publish falls back to two renames.
func exchange(a, b string) error { return errNoExchange }
