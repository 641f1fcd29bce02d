package model

import (
	"slices"
	"strings"
	"testing"
)

// TestCheckDevices: a worker's --devices list, blanks ignored, each
// checked; a name that is no device is the error, naming it, and so is a
// device listed twice (--parallel sets the shards in flight on each).
func TestCheckDevices(t *testing.T) {
	got, err := CheckDevices(" cpu, ,")
	if err != nil || !slices.Equal(got, []string{"cpu"}) {
		t.Errorf("CheckDevices(cpu, ,) = %v, %v", got, err)
	}
	if _, err := CheckDevices("cpu, cpu"); err == nil || !strings.Contains(err.Error(), "cpu is listed twice") {
		t.Errorf("CheckDevices(cpu, cpu) = %v, want an error naming the repeated device", err)
	}
	if got, err := CheckDevices(""); err != nil || len(got) != 0 {
		t.Errorf("CheckDevices(\"\") = %v, %v", got, err)
	}
	for _, bad := range []string{"cpu,gpu", "cuda:-1", "cuda:x"} {
		if _, err := CheckDevices(bad); err == nil || !strings.Contains(err.Error(), "is not cpu or cuda:N") {
			t.Errorf("CheckDevices(%q) = %v, want an error naming the device", bad, err)
		}
	}
}
