// etcd built from its server module at the version k8s.io/kubernetes pins
// (go.mod), so the cluster runs the etcd that release was tested with.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
