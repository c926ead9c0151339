// Command wqbench runs one benchmark workload over the original Go
// k8s.io/client-go/util/workqueue and prints one JSON line, so that ctrlq's wqbench can be
// compared with it side by side. Built with go.mod it runs client-go v0.26.15 (the fixed
// reference); built with `-tags latest -modfile go.latest.mod` the newest client-go, and the
// priority workload over controller-runtime's priority queue.
//
//	wqbench WORKLOAD [-n N] [-workers W] [-producers P] [-keys K] [-seed S] [-spread-ms MS]
//
// Workloads: fifo, concurrent, hotkeys, delay, ratelimited-exp, ratelimited-default, memory,
// priority (latest build only).
// The output line is
//
//	{"workload":…, "params":{n,workers,producers,keys,seed,gomaxprocs,go,client_go}, "seconds":…, "ops_per_sec":…, "extra":{…}}
//
// (delay adds "spread_ms" to params). Every extra carries "ok" (the workload's check),
// "cpu_user_s", "cpu_sys_s", "cpu_s" (getrusage RUSAGE_SELF over the timed region) and,
// last, "steal_s" (machine-wide steal time from /proc/stat over the whole run, set-up
// included, as the Rust wqbench computes it).
//
// Keys are the strings "ns-<i%100>/obj-<i>", built and converted to interface{} before
// the timer starts (except in memory). Random sequences are splitmix64. Queues are unnamed.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// params are the workload parameters after defaults and flags.
type params struct {
	n, workers, producers, keys, seed uint64
	spreadMs                          uint64
}

// splitmix64 is the generator shared with the Rust side.
type splitmix64 struct{ state uint64 }

func (g *splitmix64) next() uint64 {
	g.state += 0x9e3779b97f4a7c15
	z := g.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// key is the workload key for index i.
func key(i uint64) string {
	return "ns-" + strconv.FormatUint(i%100, 10) + "/obj-" + strconv.FormatUint(i, 10)
}

// boxedKeys returns keys 0..n-1 already converted to interface{}.
func boxedKeys(n uint64) []interface{} {
	ks := make([]interface{}, n)
	for i := range ks {
		ks[i] = key(uint64(i))
	}
	return ks
}

// ---- JSON output (ordered) ----

type field struct {
	name  string
	value interface{} // float64, bool, uint64, int, string, or []field
}

func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "null"
	}
	return strconv.FormatFloat(v, 'f', 6, 64)
}

func writeObj(b *strings.Builder, fs []field) {
	b.WriteByte('{')
	for i, f := range fs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(f.name))
		b.WriteString(": ")
		switch v := f.value.(type) {
		case float64:
			b.WriteString(num(v))
		case bool:
			b.WriteString(strconv.FormatBool(v))
		case uint64:
			b.WriteString(strconv.FormatUint(v, 10))
		case int:
			b.WriteString(strconv.Itoa(v))
		case string:
			b.WriteString(strconv.Quote(v))
		case []field:
			writeObj(b, v)
		default:
			panic(fmt.Sprintf("unsupported JSON value %T", v))
		}
	}
	b.WriteByte('}')
}

// report is one run's result.
type report struct {
	workload  string
	p         params
	seconds   float64
	opsPerSec float64
	extra     []field
}

func (r *report) add(name string, v interface{}) { r.extra = append(r.extra, field{name, v}) }

func (r *report) json() string {
	ps := []field{
		{"n", r.p.n}, {"workers", r.p.workers}, {"producers", r.p.producers},
		{"keys", r.p.keys}, {"seed", r.p.seed},
	}
	if r.workload == "delay" {
		ps = append(ps, field{"spread_ms", r.p.spreadMs})
	}
	ps = append(ps, field{"gomaxprocs", runtime.GOMAXPROCS(0)}, field{"go", runtime.Version()},
		field{"client_go", clientGoVersion()})
	var b strings.Builder
	writeObj(&b, []field{
		{"workload", r.workload},
		{"params", ps},
		{"seconds", r.seconds},
		{"ops_per_sec", r.opsPerSec},
		{"extra", r.extra},
	})
	return b.String()
}

// clientGoVersion is the version of k8s.io/client-go this binary was built with.
func clientGoVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "k8s.io/client-go" {
				return dep.Version
			}
		}
	}
	return "unknown"
}

// ---- process / machine measurements ----

type cpuMark struct{ user, sys time.Duration }

func tv(t syscall.Timeval) time.Duration {
	return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
}

func rusage() syscall.Rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return ru
}

func cpuNow() cpuMark {
	ru := rusage()
	return cpuMark{tv(ru.Utime), tv(ru.Stime)}
}

// addCPU appends cpu_user_s, cpu_sys_s, cpu_s for the region since c0.
func (r *report) addCPU(c0 cpuMark) {
	c1 := cpuNow()
	u, s := (c1.user - c0.user).Seconds(), (c1.sys - c0.sys).Seconds()
	r.add("cpu_user_s", u)
	r.add("cpu_sys_s", s)
	r.add("cpu_s", u+s)
}

func maxRSSBytes() float64 { return float64(rusage().Maxrss) * 1024 }

// stealTicks reads the machine-wide steal time (the 8th value of the "cpu " line of
// /proc/stat, in USER_HZ = 100/s ticks); ok is false where it cannot be read.
func stealTicks() (uint64, bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "cpu ") {
			fs := strings.Fields(line)
			if len(fs) < 9 {
				return 0, false
			}
			v, err := strconv.ParseUint(fs[8], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// percentile is the nearest-rank percentile p (0..100) of sorted values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

// ---- workloads ----

// runWorkers starts w workers that Get → Done until shutdown; processed counts items.
func runWorkers(q workqueue.Interface, w uint64, processed *int64, wg *sync.WaitGroup) {
	for i := uint64(0); i < w; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int64
			for {
				item, shutdown := q.Get()
				if shutdown {
					break
				}
				q.Done(item)
				n++
			}
			atomic.AddInt64(processed, n)
		}()
	}
}

func fifo(p params) *report {
	keys := boxedKeys(p.n)
	q := workqueue.New()
	var processed int64
	var wg sync.WaitGroup
	c0 := cpuNow()
	t0 := time.Now()
	for _, k := range keys {
		q.Add(k)
	}
	addS := time.Since(t0).Seconds()
	t1 := time.Now()
	runWorkers(q, p.workers, &processed, &wg)
	q.ShutDown()
	wg.Wait()
	drainS := time.Since(t1).Seconds()
	r := &report{workload: "fifo", p: p, seconds: addS + drainS, opsPerSec: 3 * float64(p.n) / (addS + drainS)}
	r.add("ok", uint64(atomic.LoadInt64(&processed)) == p.n)
	r.addCPU(c0)
	r.add("add_seconds", addS)
	r.add("drain_seconds", drainS)
	return r
}

func concurrent(p params) *report {
	keys := boxedKeys(p.n)
	q := workqueue.New()
	var processed int64
	var wg, pwg sync.WaitGroup
	per := p.n / p.producers
	c0 := cpuNow()
	t0 := time.Now()
	runWorkers(q, p.workers, &processed, &wg)
	for pi := uint64(0); pi < p.producers; pi++ {
		lo, hi := pi*per, (pi+1)*per
		if pi+1 == p.producers {
			hi = p.n
		}
		pwg.Add(1)
		go func(ks []interface{}) {
			defer pwg.Done()
			for _, k := range ks {
				q.Add(k)
			}
		}(keys[lo:hi])
	}
	pwg.Wait()
	q.ShutDownWithDrain()
	wg.Wait()
	secs := time.Since(t0).Seconds()
	got := uint64(atomic.LoadInt64(&processed))
	r := &report{workload: "concurrent", p: p, seconds: secs, opsPerSec: 3 * float64(p.n) / secs}
	r.add("ok", got == p.n)
	r.addCPU(c0)
	r.add("items_per_sec", float64(p.n)/secs)
	r.add("processed", got)
	return r
}

func hotkeys(p params) *report {
	keys := boxedKeys(p.keys)
	plans := make([][]interface{}, p.producers)
	for pi := range plans {
		g := splitmix64{p.seed*1000 + uint64(pi)}
		plan := make([]interface{}, p.n)
		for i := range plan {
			plan[i] = keys[g.next()%p.keys]
		}
		plans[pi] = plan
	}
	q := workqueue.New()
	var inFlight sync.Map
	var processed, violations int64
	var wg, pwg sync.WaitGroup
	c0 := cpuNow()
	t0 := time.Now()
	for w := uint64(0); w < p.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n, v int64
			for {
				item, shutdown := q.Get()
				if shutdown {
					break
				}
				if _, loaded := inFlight.LoadOrStore(item, struct{}{}); loaded {
					v++
				}
				inFlight.Delete(item)
				q.Done(item)
				n++
			}
			atomic.AddInt64(&processed, n)
			atomic.AddInt64(&violations, v)
		}()
	}
	for _, plan := range plans {
		pwg.Add(1)
		go func(plan []interface{}) {
			defer pwg.Done()
			for _, k := range plan {
				q.Add(k)
			}
		}(plan)
	}
	pwg.Wait()
	q.ShutDownWithDrain()
	wg.Wait()
	secs := time.Since(t0).Seconds()
	adds := float64(p.producers * p.n)
	got := atomic.LoadInt64(&processed)
	viol := atomic.LoadInt64(&violations)
	r := &report{workload: "hotkeys", p: p, seconds: secs, opsPerSec: adds / secs}
	r.add("ok", viol == 0)
	r.addCPU(c0)
	r.add("processed", uint64(got))
	gotF := float64(got)
	if gotF < 1 {
		gotF = 1
	}
	r.add("adds_per_process", adds/gotF)
	r.add("violations", uint64(viol))
	return r
}

// indexOf reads i back from the key "ns-…/obj-<i>".
func indexOf(k string) int {
	j := strings.LastIndex(k, "obj-")
	if j < 0 {
		panic("bad key " + k)
	}
	i, err := strconv.Atoi(k[j+4:])
	if err != nil {
		panic("bad key " + k)
	}
	return i
}

func delay(p params) *report {
	keys := boxedKeys(p.n)
	g := splitmix64{p.seed}
	mod := p.spreadMs*1_000_000 + 1
	delays := make([]time.Duration, p.n)
	for i := range delays {
		delays[i] = time.Duration(g.next() % mod)
	}
	q := workqueue.NewDelayingQueue()
	base := time.Now()
	// deadline i in ns after base (monotonic), written before key i is added; the queue's
	// channel and lock order that write before the consumer's read.
	deadlines := make([]int64, p.n)
	n := int(p.n)
	lateness := make([]float64, 0, n)
	done := make(chan time.Time)
	go func() {
		for len(lateness) < n {
			item, shutdown := q.Get()
			now := int64(time.Since(base))
			if shutdown {
				panic("the queue is open")
			}
			late := now - deadlines[indexOf(item.(string))]
			if late < 0 {
				late = 0
			}
			lateness = append(lateness, float64(late)/1e6)
			q.Done(item)
		}
		done <- time.Now()
	}()
	c0 := cpuNow()
	t0 := time.Now()
	for i, k := range keys {
		d := delays[i]
		deadlines[i] = int64(time.Since(base)) + int64(d)
		q.AddAfter(k, d)
	}
	addS := time.Since(t0).Seconds()
	tEnd := <-done
	secs := tEnd.Sub(t0).Seconds()
	r := &report{workload: "delay", p: p, seconds: secs, opsPerSec: float64(p.n) / secs}
	r.add("ok", len(lateness) == n)
	r.addCPU(c0)
	q.ShutDown()
	r.add("add_seconds", addS)
	sort.Float64s(lateness)
	sum := 0.0
	for _, v := range lateness {
		sum += v
	}
	r.add("lateness_ms", []field{
		{"min", lateness[0]},
		{"p50", percentile(lateness, 50)},
		{"p99", percentile(lateness, 99)},
		{"max", lateness[len(lateness)-1]},
		{"avg", sum / float64(len(lateness))},
	})
	return r
}

// durationSink receives the ratelimited workloads' combined results.
var durationSink time.Duration

func ratelimited(id string, p params, limiter workqueue.RateLimiter) *report {
	k := p.keys
	if k < 1 {
		k = 1
	}
	keys := boxedKeys(k)
	var sink time.Duration // keeps the results used (xor: the default limiter's delays overflow a sum)
	c0 := cpuNow()
	t0 := time.Now()
	for i := uint64(0); i < p.n; i++ {
		sink ^= limiter.When(keys[i%k])
	}
	whenS := time.Since(t0).Seconds()
	t1 := time.Now()
	for _, key := range keys {
		limiter.Forget(key)
	}
	forgetS := time.Since(t1).Seconds()
	ok := true
	for _, key := range keys {
		if limiter.NumRequeues(key) != 0 {
			ok = false
		}
	}
	r := &report{workload: id, p: p, seconds: whenS + forgetS, opsPerSec: float64(p.n) / whenS}
	durationSink = sink
	r.add("ok", ok)
	r.addCPU(c0)
	r.add("ns_per_when", whenS*1e9/float64(p.n))
	r.add("ns_per_forget", forgetS*1e9/float64(k))
	return r
}

func memory(p params) *report {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m0)
	c0 := cpuNow()
	t0 := time.Now()
	q := workqueue.New()
	for i := uint64(0); i < p.n; i++ {
		q.Add(key(i))
	}
	secs := time.Since(t0).Seconds()
	r := &report{workload: "memory", p: p, seconds: secs, opsPerSec: float64(p.n) / secs}
	c1 := cpuNow()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	ok := uint64(q.Len()) == p.n
	runtime.KeepAlive(q)
	n := float64(p.n)
	inuse := (float64(m1.HeapInuse) - float64(m0.HeapInuse)) / n
	alloc := (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / n
	r.add("ok", ok)
	u, s := (c1.user - c0.user).Seconds(), (c1.sys - c0.sys).Seconds()
	r.add("cpu_user_s", u)
	r.add("cpu_sys_s", s)
	r.add("cpu_s", u+s)
	// heap_bytes_per_item is the Rust side's name: live heap bytes / n. Go's closest figure
	// is the live (allocated, size-class rounded) bytes, i.e. the HeapAlloc delta.
	r.add("heap_bytes_per_item", alloc)
	r.add("heap_inuse_bytes_per_item", inuse)
	r.add("heap_alloc_bytes_per_item", alloc)
	r.add("max_rss_bytes", maxRSSBytes())
	return r
}

// ---- command line ----

var ids = []string{"fifo", "concurrent", "hotkeys", "delay", "ratelimited-exp", "ratelimited-default", "memory", "priority"}

func defaults(id string) params {
	p := params{n: 1_000_000, workers: 4, producers: 4, keys: 1_000, seed: 1, spreadMs: 1000}
	switch id {
	case "delay":
		p.n = 100_000
	case "ratelimited-exp", "ratelimited-default":
		p.keys = 10_000
	}
	return p
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: wqbench WORKLOAD [-n N] [-workers W] [-producers P] [-keys K] [-seed S] [-spread-ms MS]")
	fmt.Fprintln(os.Stderr, "workloads:", strings.Join(ids, ", "))
}

func main() {
	fs := flag.NewFlagSet("wqbench", flag.ContinueOnError)
	fs.Usage = usage
	n := fs.Uint64("n", 0, "items / calls / adds per producer (workload default if not given)")
	workers := fs.Uint64("workers", 0, "worker goroutines")
	producers := fs.Uint64("producers", 0, "producer goroutines")
	keysF := fs.Uint64("keys", 0, "distinct keys")
	seed := fs.Uint64("seed", 0, "splitmix64 seed (default 1)")
	spread := fs.Uint64("spread-ms", 0, "delay workload: delays uniform in [0, spread] ms (default 1000)")

	args := os.Args[1:]
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		usage()
		os.Exit(2)
	}
	id := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "unexpected argument", fs.Arg(0))
		usage()
		os.Exit(2)
	}
	p := defaults(id)
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "n":
			p.n = *n
		case "workers":
			p.workers = *workers
		case "producers":
			p.producers = *producers
		case "keys":
			p.keys = *keysF
		case "seed":
			p.seed = *seed
		case "spread-ms":
			p.spreadMs = *spread
		}
	})
	if p.n == 0 || (id == "concurrent" && p.producers == 0) || (id == "hotkeys" && p.keys == 0) {
		fmt.Fprintln(os.Stderr, "n, producers (concurrent) and keys (hotkeys) must be positive")
		os.Exit(2)
	}

	steal0, steal0ok := stealTicks()
	var r *report
	switch id {
	case "fifo":
		r = fifo(p)
	case "concurrent":
		r = concurrent(p)
	case "hotkeys":
		r = hotkeys(p)
	case "delay":
		r = delay(p)
	case "ratelimited-exp":
		r = ratelimited(id, p, workqueue.NewItemExponentialFailureRateLimiter(5*time.Millisecond, 1000*time.Second))
	case "ratelimited-default":
		r = ratelimited(id, p, workqueue.DefaultControllerRateLimiter())
	case "memory":
		r = memory(p)
	case "priority":
		r = priority(p)
	default:
		fmt.Fprintf(os.Stderr, "unknown workload %q\n", id)
		usage()
		os.Exit(2)
	}
	// Machine-wide, over the whole run (set-up included), as the Rust side computes it.
	if steal1, ok := stealTicks(); ok && steal0ok {
		var d uint64
		if steal1 > steal0 {
			d = steal1 - steal0
		}
		r.add("steal_s", float64(d)*0.01)
	}
	fmt.Println(r.json())
}
