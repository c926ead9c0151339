// Command goelector is client-go's own leader election (tools/leaderelection, RunOrDie with a
// resourcelock.LeaseLock) as a small process, for the tests that run it beside the crate's
// LeaseLock electors on one Lease (crates/leader/tests/lease_go_elector.rs builds and starts it).
//
// It prints one line per event on stdout, each written at once, with the wall-clock time in
// nanoseconds since the Unix epoch:
//
//	leader <ns> <identity>        OnNewLeader: the holder this candidate observes changed
//	started <ns> <transitions>    OnStartedLeading: this candidate leads; <transitions> is the
//	                              Lease's spec.leaseTransitions as its acquiring write left it
//	stopping <ns>                 SIGTERM or SIGINT: the leading context is cancelled right after
//	                              (client-go then releases the Lease, ReleaseOnCancel)
//	stopped <ns>                  OnStoppedLeading (client-go calls it also when it never led)
//
// It exits 0 once RunOrDie returns after a signal, 2 on bad flags, 1 when it cannot build a
// client.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

var out sync.Mutex

// emit writes one event line with the current wall-clock time. os.Stdout is unbuffered: each
// line is one write, seen by the reader as soon as it is printed.
func emit(event string, args ...any) {
	now := time.Now().UnixNano()
	out.Lock()
	defer out.Unlock()
	line := fmt.Sprintf("%s %d", event, now)
	for _, a := range args {
		line += fmt.Sprintf(" %v", a)
	}
	fmt.Fprintln(os.Stdout, line)
}

// recordingLock is the Lease lock that remembers the last record this candidate wrote naming
// itself: OnStartedLeading reads the acquiring write's leaseTransitions from it. (client-go's
// LeaseLock is not safe for use beside the elector's own calls, so it is never read directly.)
type recordingLock struct {
	resourcelock.Interface
	mu      sync.Mutex
	written *resourcelock.LeaderElectionRecord
}

func (l *recordingLock) note(ler resourcelock.LeaderElectionRecord, err error) error {
	if err == nil && ler.HolderIdentity == l.Identity() {
		l.mu.Lock()
		l.written = &ler
		l.mu.Unlock()
	}
	return err
}

func (l *recordingLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.note(ler, l.Interface.Create(ctx, ler))
}

func (l *recordingLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.note(ler, l.Interface.Update(ctx, ler))
}

func (l *recordingLock) transitions() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written == nil {
		return -1 // never happens: client-go calls OnStartedLeading after a successful write
	}
	return l.written.LeaderTransitions
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (optional with -server)")
	server := flag.String("server", "", "API server URL (overrides the kubeconfig's)")
	tokenFile := flag.String("token-file", "", "bearer token file")
	caFile := flag.String("ca-file", "", "CA bundle for the API server's certificate")
	namespace := flag.String("namespace", "", "the Lease's namespace")
	name := flag.String("name", "", "the Lease's name")
	identity := flag.String("identity", "", "this candidate's identity")
	leaseDuration := flag.Duration("lease-duration", 15*time.Second, "LeaseDuration")
	renewDeadline := flag.Duration("renew-deadline", 10*time.Second, "RenewDeadline")
	retryPeriod := flag.Duration("retry-period", 2*time.Second, "RetryPeriod")
	flag.Parse()
	if *namespace == "" || *name == "" || *identity == "" || (*server == "" && *kubeconfig == "") {
		fmt.Fprintln(os.Stderr, "goelector: -namespace, -name, -identity and -server or -kubeconfig are required")
		flag.Usage()
		os.Exit(2)
	}

	config, err := clientcmd.BuildConfigFromFlags(*server, *kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "goelector: client configuration: %v\n", err)
		os.Exit(1)
	}
	if *tokenFile != "" {
		config.BearerToken = ""
		config.BearerTokenFile = *tokenFile
	}
	if *caFile != "" {
		config.CAData = nil
		config.CAFile = *caFile
	}
	config.UserAgent = "goelector/" + *identity
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintf(os.Stderr, "goelector: client: %v\n", err)
		os.Exit(1)
	}

	lock := &recordingLock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: *namespace, Name: *name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: *identity},
	}}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		// Printed before the cancel: the leading context (a child of ctx) is cancelled by it,
		// and client-go releases the Lease only after that.
		emit("stopping")
		cancel()
	}()

	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   *leaseDuration,
		RenewDeadline:   *renewDeadline,
		RetryPeriod:     *retryPeriod,
		ReleaseOnCancel: true,
		Name:            *name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				emit("started", lock.transitions())
			},
			OnStoppedLeading: func() {
				emit("stopped")
			},
			OnNewLeader: func(holder string) {
				emit("leader", holder)
			},
		},
	})
}
