package app

import (
	"log/slog"

	"github.com/concord-dev/concord/apiserver"
	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
)

// An Option changes how New builds a server, beyond its Config: what
// in-process servers (tests, benchmarks) vary.
type Option func(*options)

type options struct {
	log         *slog.Logger
	watch       registry.WatchConfig
	wrapStorage func(*etcdstore.Store) registry.Storage
	storeOpts   []registry.StoreOption
	controllers Controllers
	handler     func(*apiserver.Config)
	authorizers []filters.Authorizer
}

func defaultOptions() options {
	return options{
		watch:       registry.DefaultWatchConfig(),
		wrapStorage: func(s *etcdstore.Store) registry.Storage { return s },
		controllers: AllControllers(),
		handler:     func(*apiserver.Config) {},
	}
}

// WithLogger logs to log instead of standard error in --log-format.
func WithLogger(log *slog.Logger) Option { return func(o *options) { o.log = log } }

// WithWatchConfig sets the watch fan-out of every store
// (registry.DefaultWatchConfig otherwise).
func WithWatchConfig(cfg registry.WatchConfig) Option {
	return func(o *options) { o.watch = cfg }
}

// WithStorage puts wrap's storage between the stores and etcd, so that a
// test can step into the write path.
func WithStorage(wrap func(*etcdstore.Store) registry.Storage) Option {
	return func(o *options) { o.wrapStorage = wrap }
}

// WithStoreOptions configures every store with opts too, after those of
// the Config.
func WithStoreOptions(opts ...registry.StoreOption) Option {
	return func(o *options) { o.storeOpts = append(o.storeOpts, opts...) }
}

// WithControllers runs only the controllers c names (all otherwise).
func WithControllers(c Controllers) Option { return func(o *options) { o.controllers = c } }

// WithHandlerConfig lets f change the API handler's configuration last:
// a test of /readyz puts in checks of its own.
func WithHandlerConfig(f func(*apiserver.Config)) Option {
	return func(o *options) { o.handler = f }
}

// WithAuthorizer asks a first, before the --authorization-mode
// authorizers (and the RBAC escalation checks ask it too): a test's
// stand-in for an authorizer the binary has no flag for, such as a
// webhook in front of RBAC.
func WithAuthorizer(a filters.Authorizer) Option {
	return func(o *options) { o.authorizers = append(o.authorizers, a) }
}
