package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/google/uuid"

	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller/leaderelect"
)

// elector runs controllers that must run on one replica at a time, each
// under a Lease of its own in kube-system, as kube-controller-manager's.
type elector struct {
	cfg      leaderelect.Config
	identity string
}

// newElector returns the elector of this process: its identity is the
// host name and a random suffix, as kube-controller-manager's.
func newElector(cfg leaderelect.Config, leases *registry.Store, log *slog.Logger) *elector {
	host, err := os.Hostname()
	if err != nil {
		host = "concord"
	}
	cfg.Leases, cfg.Log = leases, log
	return &elector{cfg: cfg, identity: fmt.Sprintf("%s_%s", host, uuid.NewString())}
}

// run runs lead under the Lease kube-system/<lease> until ctx ends.
func (e *elector) run(ctx context.Context, lease string, lead func(ctx context.Context)) {
	cfg := e.cfg
	cfg.Namespace, cfg.Name, cfg.Identity = "kube-system", lease, e.identity
	go leaderelect.Run(ctx, cfg, lead)
}
