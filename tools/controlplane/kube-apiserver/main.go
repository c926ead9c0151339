// Command kube-apiserver is Kubernetes' API server, built from the k8s.io/kubernetes module at the
// version go.mod requires: the same main as the release's cmd/kube-apiserver. The project's tests
// start it (with etcd from ../etcd) as a real control plane; scripts/install-controlplane builds it.
package main

import (
	"os"
	_ "time/tzdata" // for timeZone support in CronJob

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
