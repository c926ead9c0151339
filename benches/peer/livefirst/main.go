// Command livefirst is the controller-runtime side of the benches' `livefirst` workload
// (benches/src/bin/livefirst.rs, WORKLOADS.md "livefirst"): a controller-runtime manager with one
// controller of the ConfigMaps of one namespace, as a user writes it (ctrl.GetConfig, the
// builder's For, MaxConcurrentReconciles workers, every other option at its default: in v0.23
// and later that is the priority queue, initial-list events at priority -100, live ones at 0).
// Each reconcile reads the ConfigMap from the manager's cache, prints one line
//
//	<unix-nanos> <name> <data["live"] or ->
//
// (the instant the reconcile started, the object's name and the value of its "live" data field
// as the cache holds it), sleeps -reconcile, and returns. The Rust bench starts it with
// KUBECONFIG set and kills it when its run is over.
//
//	livefirst -namespace NS [-workers 4] [-reconcile 1ms]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// record is one reconcile as printed.
type record struct {
	at    int64
	name  string
	value string
}

type reconciler struct {
	client client.Client
	sleep  time.Duration
	out    chan<- record
}

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	at := time.Now().UnixNano()
	value := "-"
	var cm corev1.ConfigMap
	if err := r.client.Get(ctx, req.NamespacedName, &cm); err == nil {
		if v, ok := cm.Data["live"]; ok {
			value = v
		}
	}
	r.out <- record{at: at, name: req.Name, value: value}
	time.Sleep(r.sleep)
	return reconcile.Result{}, nil
}

// write prints the records, flushing whenever none is waiting, so that the bench sees each
// reconcile within about a scheduling delay without a write per line.
func write(in <-chan record) {
	w := bufio.NewWriterSize(os.Stdout, 1<<16)
	buf := make([]byte, 0, 64)
	for rec := range in {
		for {
			buf = strconv.AppendInt(buf[:0], rec.at, 10)
			buf = append(buf, ' ')
			buf = append(buf, rec.name...)
			buf = append(buf, ' ')
			buf = append(buf, rec.value...)
			buf = append(buf, '\n')
			if _, err := w.Write(buf); err != nil {
				os.Exit(1)
			}
			select {
			case rec = <-in:
				continue
			default:
			}
			break
		}
		if err := w.Flush(); err != nil {
			os.Exit(1)
		}
	}
}

func main() {
	namespace := flag.String("namespace", "", "the namespace of the ConfigMaps")
	workers := flag.Int("workers", 4, "MaxConcurrentReconciles")
	sleep := flag.Duration("reconcile", time.Millisecond, "how long each reconcile sleeps")
	flag.Parse()
	if *namespace == "" {
		fmt.Fprintln(os.Stderr, "usage: livefirst -namespace NS [-workers 4] [-reconcile 1ms]")
		os.Exit(2)
	}
	ctrl.SetLogger(logr.Discard())
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "livefirst: config:", err)
		os.Exit(1)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}},
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "livefirst: manager:", err)
		os.Exit(1)
	}
	out := make(chan record, 1<<16)
	go write(out)
	err = ctrl.NewControllerManagedBy(mgr).
		Named("livefirst").
		For(&corev1.ConfigMap{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: *workers}).
		Complete(&reconciler{client: mgr.GetClient(), sleep: *sleep, out: out})
	if err != nil {
		fmt.Fprintln(os.Stderr, "livefirst: controller:", err)
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, "livefirst: manager stopped:", err)
		os.Exit(1)
	}
}
