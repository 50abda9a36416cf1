// Command etcd is etcd's own server, built from the etcd version Concord is
// pinned to (go.etcd.io/etcd/server/v3), so that deploy/ and the fault tests
// run a real multi-member etcd cluster without another download.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
