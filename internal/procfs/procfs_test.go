package procfs

import (
	"os"
	"testing"
)

func TestVmRSS(t *testing.T) {
	rss, err := parseVmRSS([]byte("Name:\tx\nVmPeak:\t 999 kB\nVmRSS:\t   12345 kB\n"))
	if err != nil || rss != 12345 {
		t.Errorf("parseVmRSS = %d, %v; want 12345", rss, err)
	}
	if _, err := parseVmRSS([]byte("Name:\tx\n")); err == nil {
		t.Error("parseVmRSS without a VmRSS line: no error")
	}
	// This process can be read like any other.
	if _, err := VmRSS(os.Getpid()); err != nil {
		t.Errorf("VmRSS(self): %v", err)
	}
}
