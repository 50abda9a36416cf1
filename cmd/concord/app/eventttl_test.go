package app

import (
	"flag"
	"testing"
	"time"
)

func TestEventTTLFlag(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("concord", flag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if cfg.EventTTL != time.Hour {
		t.Errorf("--event-ttl default = %s; want 1h0m0s (kube-apiserver's)", cfg.EventTTL)
	}
	if err := fs.Parse([]string{"--event-ttl=3s"}); err != nil || cfg.EventTTL != 3*time.Second {
		t.Errorf("--event-ttl=3s: %s, %v; want 3s", cfg.EventTTL, err)
	}
	runValidateCases(t, []validateCase{
		{"1h", func(c *Config) { c.EventTTL = time.Hour }, ""},
		{"1s", func(c *Config) { c.EventTTL = time.Second }, ""},
		{"zero", func(c *Config) { c.EventTTL = 0 }, "--event-ttl: 0s must be at least 1s"},
		{"below a second", func(c *Config) { c.EventTTL = 500 * time.Millisecond }, "--event-ttl: 500ms must be at least 1s"},
		{"negative", func(c *Config) { c.EventTTL = -time.Minute }, "--event-ttl: -1m0s must be at least 1s"},
	})
}
