// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 at the version go.mod
// requires (the one the k8s.io/kubernetes release there is built and tested against): the same
// entry point as etcd's own main. scripts/install-controlplane builds it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
