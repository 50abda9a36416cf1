// Package procfs reads what benchmarks report of a process from Linux's
// /proc.
package procfs

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// VmRSS is the resident set size of process pid, in KiB.
func VmRSS(pid int) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmRSS(status)
}

func parseVmRSS(status []byte) (int64, error) {
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS line %q: %w", line, err)
			}
			return kib, nil
		}
	}
	return 0, errors.New("no VmRSS line in /proc/<pid>/status")
}
