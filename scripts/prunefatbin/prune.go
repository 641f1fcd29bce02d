// Command prunefatbin zeroes the device code of every GPU architecture but
// the kept ones in a CUDA shared library's .nv_fatbin section, as nvprune
// would, so that ONNX Runtime's CUDA provider compresses small enough to ship
// to a GPU machine (`make ort-gpu GPU_ARCHS=90`, `make gpu-bundle`). Headers
// stay intact and the file keeps its size and layout: the CUDA runtime still
// parses every fatbin and loads the kept architectures' cubins, which are
// untouched.
//
//	go run ./scripts/prunefatbin IN OUT 90[,80...]
package main

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// fatbinMagic opens every fatbin in the section (little endian).
const fatbinMagic = 0xBA55ED50

// Layout of a fatbin header (magic u32, version u16, header size u16,
// payload size u64) and of each entry's header (kind u16, version u16,
// header size u32, payload size u64, ..., arch u32 at offset 28).
const (
	fatbinHeaderMin = 16
	entryHeaderMin  = 32
	entryArchOffset = 28
)

// stats is what pruning kept and zeroed, in payload bytes.
type stats struct {
	Fatbins, Entries int
	Kept, Zeroed     int64
}

// prune zeroes, in b, the payload of every fatbin entry whose architecture is
// not in keep. It looks for fatbins in the ELF file's .nv_fatbin section when
// b is an ELF file that has one, else in the whole of b. A fatbin whose sizes
// run past its region is an error: b is then partly pruned and must not be
// written.
func prune(b []byte, keep map[uint32]bool) (stats, error) {
	lo, hi := 0, len(b)
	if f, err := elf.NewFile(bytes.NewReader(b)); err == nil {
		if s := f.Section(".nv_fatbin"); s != nil && s.Type != elf.SHT_NOBITS {
			if s.Offset > uint64(len(b)) || s.Size > uint64(len(b))-s.Offset {
				return stats{}, fmt.Errorf(".nv_fatbin (offset %d, size %d) runs past the file's %d bytes", s.Offset, s.Size, len(b))
			}
			lo, hi = int(s.Offset), int(s.Offset+s.Size)
		}
	}
	var st stats
	var magic [4]byte
	binary.LittleEndian.PutUint32(magic[:], fatbinMagic)
	le := binary.LittleEndian
	for at := lo; at < hi; {
		i := bytes.Index(b[at:hi], magic[:])
		if i < 0 {
			break
		}
		i += at
		if hi-i < fatbinHeaderMin {
			return st, fmt.Errorf("fatbin at %#x: header cut short", i)
		}
		hs, fs := int(le.Uint16(b[i+6:])), le.Uint64(b[i+8:])
		if hs < fatbinHeaderMin || uint64(hi-i-hs) < fs {
			return st, fmt.Errorf("fatbin at %#x: header size %d, payload %d run past the section's end %#x", i, hs, fs, hi)
		}
		st.Fatbins++
		off, end := i+hs, i+hs+int(fs)
		for off < end {
			if end-off < entryHeaderMin {
				return st, fmt.Errorf("fatbin at %#x: entry at %#x cut short", i, off)
			}
			ehs, size := int(le.Uint32(b[off+4:])), le.Uint64(b[off+8:])
			if ehs < entryHeaderMin || ehs > end-off || uint64(end-off-ehs) < size {
				return st, fmt.Errorf("fatbin at %#x: entry at %#x (header %d, payload %d) runs past the fatbin's end %#x", i, off, ehs, size, end)
			}
			st.Entries++
			payload := b[off+ehs : off+ehs+int(size)]
			if keep[le.Uint32(b[off+entryArchOffset:])] {
				st.Kept += int64(size)
			} else {
				clear(payload)
				st.Zeroed += int64(size)
			}
			off += ehs + int(size)
		}
		at = end
	}
	if st.Fatbins == 0 {
		return st, errors.New("no fatbin found (is this a CUDA library?)")
	}
	return st, nil
}

// parseArchs reads "90" or "80,90" (sm_ numbers).
func parseArchs(s string) (map[uint32]bool, error) {
	keep := map[uint32]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimPrefix(strings.TrimSpace(f), "sm_")
		n, err := strconv.ParseUint(f, 10, 32)
		if err != nil || n < 10 {
			return nil, fmt.Errorf("architecture %q is not an sm number such as 90 or sm_90", f)
		}
		keep[uint32(n)] = true
	}
	return keep, nil
}

func run(args []string) error {
	if len(args) != 3 {
		return errors.New("usage: prunefatbin IN OUT ARCHS (ARCHS: sm numbers to keep, e.g. 90 or 80,90)")
	}
	keep, err := parseArchs(args[2])
	if err != nil {
		return err
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	st, err := prune(b, keep)
	if err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	tmp := args[1] + ".tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		return err
	}
	if err := os.Rename(tmp, args[1]); err != nil {
		return err
	}
	fmt.Printf("%s: %d fatbins, %d entries; kept sm_%s: %.1f MB; zeroed %.1f MB\n",
		args[1], st.Fatbins, st.Entries, args[2], float64(st.Kept)/1e6, float64(st.Zeroed)/1e6)
	return nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "prunefatbin:", err)
		os.Exit(2)
	}
}
