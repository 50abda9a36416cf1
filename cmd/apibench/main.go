// Command apibench measures Kubernetes-compatible API servers side by side
// with raw etcd, the physical limit of a server whose every write is one
// etcd transaction (issue 7).
//
// Every target gets the same workloads (create, update, contended, get,
// list, watch), in windows of --duration, interleaved over --rounds rounds
// (A B A B …), so that a noisy shared machine slows every target alike;
// each result is printed with its ratio to the first target. An etcd target
// (--etcd) does the same operations as bare etcd requests on Concord's key
// layout (<etcd-prefix>/configmaps/<namespace>/<name>) with the same JSON
// values.
//
//	apibench --etcd etcd=http://127.0.0.1:2379 --target concord=http://127.0.0.1:8080 \
//	    --etcd-pid etcd=$ETCD_PID --server-pid concord=$CONCORD_PID --etcd-pid concord=$ETCD_PID \
//	    --workload create,update,contended,get,list,watch --rounds 5 --duration 3s
//
// --resource configmaps,widgets measures every API target twice, on
// ConfigMaps and on widgets, a custom resource whose CRD (one CEL rule)
// apibench installs, with objects of the same JSON size, and prints the
// ratio widgets/configmaps per workload. --workload crds installs --crds
// CRDs and times their establishing, discovery and OpenAPI, and (with
// --replica-bin) a replica's start-up and memory per idle CRD.
//
// --protobuf makes the API targets send and accept Kubernetes protobuf for
// ConfigMaps, as client-go's typed clients do (widgets stay JSON: kube
// serves no protobuf for custom resources).
//
// See docs/performance.md for the method and the latest measurements.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("apibench", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: apibench [flags] (--target name=URL | --kubeconfig name=PATH | --etcd name=URL)...\n\n")
		fmt.Fprintf(fs.Output(), "Measures every target with the same workloads, interleaved, and prints each result with its ratio to the first target.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	cfg.AddFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "apibench: unexpected arguments %q\n", fs.Args())
		os.Exit(2)
	}
	cfg.Complete()
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "apibench: invalid flags:\n%v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		// A second signal gets the default action: exit at once.
		stop()
	}()
	rep, err := run(ctx, cfg, os.Stderr)
	if rep != nil {
		if cfg.JSON {
			if jerr := writeJSON(os.Stdout, rep); jerr != nil {
				fmt.Fprintf(os.Stderr, "apibench: %v\n", jerr)
			}
		} else {
			writeTable(os.Stdout, rep)
		}
	}
	switch {
	case err != nil:
		fmt.Fprintf(os.Stderr, "apibench: %v\n", err)
		os.Exit(1)
	case rep != nil && len(rep.Failures) > 0:
		// A lost increment or a lost watch event is a bug, not a slow run.
		os.Exit(3)
	}
}
