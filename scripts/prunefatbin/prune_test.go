package main

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// entry is one synthetic fatbin entry: an architecture and its payload.
type entry struct {
	arch    uint32
	payload []byte
}

// fatbin lays out one fatbin as the CUDA toolchain does: a 16-byte header,
// then entries with 64-byte headers (arch at offset 28).
func fatbin(entries ...entry) []byte {
	var body []byte
	for _, e := range entries {
		h := make([]byte, 64)
		binary.LittleEndian.PutUint16(h[0:], 2) // kind: cubin
		binary.LittleEndian.PutUint32(h[4:], 64)
		binary.LittleEndian.PutUint64(h[8:], uint64(len(e.payload)))
		binary.LittleEndian.PutUint32(h[28:], e.arch)
		body = append(append(body, h...), e.payload...)
	}
	h := make([]byte, 16)
	binary.LittleEndian.PutUint32(h[0:], fatbinMagic)
	binary.LittleEndian.PutUint16(h[4:], 1)
	binary.LittleEndian.PutUint16(h[6:], 16)
	binary.LittleEndian.PutUint64(h[8:], uint64(len(body)))
	return append(h, body...)
}

func fill(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }

func TestPruneKeepsOnlyTheNamedArchitectures(t *testing.T) {
	prefix := fill(37, 0xEE) // unaligned, like a section that does not start the file
	a := fatbin(entry{75, fill(100, 1)}, entry{90, fill(50, 2)}, entry{120, fill(30, 3)})
	b := fatbin(entry{90, fill(20, 4)}, entry{86, fill(70, 5)})
	file := append(append(append(append([]byte{}, prefix...), a...), fill(11, 0xEE)...), b...)
	orig := append([]byte{}, file...)

	st, err := prune(file, map[uint32]bool{90: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Fatbins != 2 || st.Entries != 5 || st.Kept != 70 || st.Zeroed != 200 {
		t.Fatalf("stats %+v, want 2 fatbins, 5 entries, 70 kept, 200 zeroed", st)
	}
	if len(file) != len(orig) {
		t.Fatalf("size changed: %d -> %d", len(orig), len(file))
	}
	// Byte by byte: payloads of sm_90 and everything outside payloads are
	// unchanged; other architectures' payloads are zero.
	zeroed := map[int]bool{}
	mark := func(base int, fb []byte) {
		off := 16
		for off < len(fb) {
			ehs := int(binary.LittleEndian.Uint32(fb[off+4:]))
			size := int(binary.LittleEndian.Uint64(fb[off+8:]))
			if binary.LittleEndian.Uint32(fb[off+28:]) != 90 {
				for i := base + off + ehs; i < base+off+ehs+size; i++ {
					zeroed[i] = true
				}
			}
			off += ehs + size
		}
	}
	mark(len(prefix), a)
	mark(len(prefix)+len(a)+11, b)
	for i := range file {
		want := orig[i]
		if zeroed[i] {
			want = 0
		}
		if file[i] != want {
			t.Fatalf("byte %d = %#x, want %#x (zeroed region: %v)", i, file[i], want, zeroed[i])
		}
	}
	if len(zeroed) != 200 {
		t.Fatalf("%d bytes marked, want 200", len(zeroed))
	}
}

func TestPruneKeepsSeveral(t *testing.T) {
	file := fatbin(entry{80, fill(10, 1)}, entry{90, fill(10, 2)}, entry{120, fill(10, 3)})
	st, err := prune(file, map[uint32]bool{80: true, 90: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Kept != 20 || st.Zeroed != 10 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPruneRejectsBrokenInput(t *testing.T) {
	good := fatbin(entry{90, fill(40, 1)}, entry{80, fill(40, 2)})
	overlong := append([]byte{}, good...)
	binary.LittleEndian.PutUint64(overlong[16+8:], 1<<40) // first entry's payload size
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"no fatbin":      {fill(100, 7), "no fatbin found"},
		"cut header":     {good[:10], "header cut short"},
		"cut payload":    {good[:len(good)-5], "run past"},
		"entry too long": {overlong, "runs past"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := prune(tc.b, map[uint32]bool{90: true})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestParseArchs(t *testing.T) {
	keep, err := parseArchs("sm_90, 80")
	if err != nil || !keep[90] || !keep[80] || len(keep) != 2 {
		t.Fatalf("%v %v", keep, err)
	}
	for _, bad := range []string{"", "x", "9", "90,"} {
		if _, err := parseArchs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
