//go:build !ref

package main

import (
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// priorityOps is the number of adds, and of get → done → add cycles, of the priority workload.
const priorityOps = 200_000

// priority runs the priority workload over controller-runtime's priority queue: n ready items
// (priorities 0..99, splitmix64), then (1) the workers together add 200,000 fresh keys, and
// (2) the workers loop get → done → add the key back at a random priority, 200,000 cycles in
// all, as the Rust priority workload does.
func priority(p params) *report {
	g := splitmix64{p.seed}
	prios := make([]int, p.n+priorityOps)
	for i := range prios {
		prios[i] = int(g.next() % 100)
	}
	q := priorityqueue.New[uint64]("")
	defer q.ShutDown()
	for i := uint64(0); i < p.n; i++ {
		q.AddWithOpts(priorityqueue.AddOpts{Priority: &prios[i]}, i)
	}
	c0 := cpuNow()
	per := priorityOps / p.workers
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := uint64(0); w < p.workers; w++ {
		wg.Add(1)
		go func(w uint64) {
			defer wg.Done()
			for j := uint64(0); j < per; j++ {
				k := p.n + w*per + j
				q.AddWithOpts(priorityqueue.AddOpts{Priority: &prios[k]}, k)
			}
		}(w)
	}
	wg.Wait()
	addNs := float64(time.Since(t0).Nanoseconds()) / float64(per*p.workers)
	var cycles atomic.Uint64
	t1 := time.Now()
	for w := uint64(0); w < p.workers; w++ {
		wg.Add(1)
		go func(w uint64) {
			defer wg.Done()
			rng := splitmix64{w}
			for j := uint64(0); j < per; j++ {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				q.Done(k)
				prio := int(rng.next() % 100)
				q.AddWithOpts(priorityqueue.AddOpts{Priority: &prio}, k)
				cycles.Add(1)
			}
		}(w)
	}
	wg.Wait()
	cycleS := time.Since(t1).Seconds()
	n := cycles.Load()
	r := &report{workload: "priority", p: p, seconds: time.Since(t0).Seconds(), opsPerSec: float64(n) / cycleS}
	r.add("ok", n == per*p.workers && uint64(q.Len()) == p.n+per*p.workers)
	r.addCPU(c0)
	r.add("add_ns", addNs)
	r.add("get_done_add_ns", cycleS*1e9/float64(n))
	return r
}
