// Command etcd-snapshot saves and restores etcd snapshots with etcd's own
// snapshot code (the pinned go.etcd.io/etcd version), the way etcdctl and
// etcdutl do:
//
//	etcd-snapshot save    --endpoints http://127.0.0.1:2379 backup.db
//	etcd-snapshot restore --data-dir /var/lib/etcd-restored --name etcd1 \
//	    --initial-cluster etcd1=http://127.0.0.1:2380 \
//	    --initial-advertise-peer-urls http://127.0.0.1:2380 \
//	    --bump-revision 1000000000 backup.db
//
// A restore must bump the revision (and marks the old ones compacted) so that
// no resourceVersion or ETag handed out before the restore is ever handed out
// again for other contents, and watches from before it get 410 Expired.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	clientsnapshot "go.etcd.io/etcd/client/v3/snapshot"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "save":
		err = save(os.Args[2:])
	case "restore":
		err = restore(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd-snapshot %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: etcd-snapshot save --endpoints URL FILE | etcd-snapshot restore --data-dir DIR --name NAME --initial-cluster C --initial-advertise-peer-urls URLS --bump-revision N FILE")
	os.Exit(2)
}

func save(args []string) error {
	fs := flag.NewFlagSet("save", flag.ExitOnError)
	endpoints := fs.String("endpoints", "http://127.0.0.1:2379", "etcd client URL to take the snapshot from")
	timeout := fs.Duration("timeout", time.Minute, "how long the snapshot may take")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		usage()
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cfg := clientv3.Config{Endpoints: strings.Split(*endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	version, err := clientsnapshot.SaveWithVersion(ctx, zap.NewNop(), cfg, fs.Arg(0))
	if err != nil {
		return err
	}
	fmt.Printf("saved %s (etcd %s)\n", fs.Arg(0), version)
	return nil
}

func restore(args []string) error {
	fs := flag.NewFlagSet("restore", flag.ExitOnError)
	dataDir := fs.String("data-dir", "", "new data directory for the restored member (must not exist)")
	name := fs.String("name", "default", "the member's name")
	cluster := fs.String("initial-cluster", "default=http://localhost:2380", "the restored cluster's members")
	peers := fs.String("initial-advertise-peer-urls", "http://localhost:2380", "this member's peer URLs")
	token := fs.String("initial-cluster-token", "etcd-cluster", "the restored cluster's token")
	bump := fs.Uint64("bump-revision", 0, "add this to the restored revision; must exceed the writes made since the snapshot (1000000000 is safe)")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 || *dataDir == "" {
		usage()
	}
	if *bump == 0 {
		return fmt.Errorf("--bump-revision is required: without it revisions, resourceVersions and ETags handed out after the snapshot would be handed out again")
	}
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        fs.Arg(0),
		Name:                *name,
		OutputDataDir:       *dataDir,
		PeerURLs:            strings.Split(*peers, ","),
		InitialCluster:      *cluster,
		InitialClusterToken: *token,
		RevisionBump:        *bump,
		MarkCompacted:       true,
	})
	if err != nil {
		return err
	}
	fmt.Printf("restored %s into %s with the revision bumped by %d\n", fs.Arg(0), *dataDir, *bump)
	return nil
}
