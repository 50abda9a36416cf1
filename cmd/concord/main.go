// Command concord is a Kubernetes-compatible API server that keeps its
// objects in etcd. Without --etcd-servers it runs an embedded etcd (dev mode).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/concord-dev/concord/cmd/concord/app"
)

func main() {
	runAsEtcdIfNamed(os.Args)
	if len(os.Args) > 1 && os.Args[1] == "envtest-assets" {
		if err := envtestAssetsCommand(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "concord envtest-assets: %v\n", err)
			os.Exit(2)
		}
		return
	}
	cfg := app.DefaultConfig()
	fs := flag.NewFlagSet("concord", flag.ExitOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	cfg.Complete()
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "concord: invalid flags:\n%v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		// A second signal gets the default action: exit at once.
		stop()
	}()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "concord: %v\n", err)
		os.Exit(1)
	}
}

// run builds the server and serves until ctx ends.
func run(ctx context.Context, cfg app.Config) error {
	srv, err := app.New(ctx, cfg)
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}
