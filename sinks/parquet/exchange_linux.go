//go:build linux

package parquet

import (
	"errors"

	"golang.org/x/sys/unix"
)

// errNoExchange: the filesystem cannot swap two paths atomically.
var errNoExchange = errors.New("atomic exchange unsupported")

// exchange atomically swaps the directories at a and b.
func exchange(a, b string) error {
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		return errNoExchange
	}
	return err
}
