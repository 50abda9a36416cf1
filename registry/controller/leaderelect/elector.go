package leaderelect

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/google/uuid"

	"github.com/concord-dev/concord/registry"
)

// Elector runs controllers that must run on one replica at a time, each
// under a Lease of its own in kube-system, as kube-controller-manager's.
type Elector struct {
	cfg      Config
	identity string
}

// NewElector returns the elector of this process, campaigning with cfg's
// timings in leases: its identity is the host name and a random suffix,
// as kube-controller-manager's.
func NewElector(cfg Config, leases *registry.Store, log *slog.Logger) *Elector {
	host, err := os.Hostname()
	if err != nil {
		host = "concord"
	}
	cfg.Leases, cfg.Log = leases, log
	return &Elector{cfg: cfg, identity: fmt.Sprintf("%s_%s", host, uuid.NewString())}
}

// Run runs lead under the Lease kube-system/<lease> until ctx ends (Run).
func (e *Elector) Run(ctx context.Context, lease string, lead func(ctx context.Context)) {
	cfg := e.cfg
	cfg.Namespace, cfg.Name, cfg.Identity = "kube-system", lease, e.identity
	Run(ctx, cfg, lead)
}
