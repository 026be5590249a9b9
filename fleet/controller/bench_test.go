package controller

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cpuTime is the process's user plus system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReconcileMembershipChange reconciles a pool of 100 gateways
// (three zones) and 10,000 tunnels against the fake client after one
// gateway's Lease is deleted (leave) or created again (join), and reports
// the CPU time and the writes of that reconcile: the target is
// under 10 s of CPU and about 1/N of the assignments rewritten.
//
//	go test -run '^$' -bench ReconcileMembershipChange -benchtime 4x ./controller/
func BenchmarkReconcileMembershipChange(b *testing.B) {
	const gateways, tunnels = 100, 10000
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	objs := []client.Object{newPool("p")}
	for i := range gateways {
		objs = append(objs, newLease("p", fmt.Sprintf("gw-%03d", i), fmt.Sprintf("z%d", i%3), now))
	}
	for i := range tunnels {
		objs = append(objs, newTunnel("p", fmt.Sprintf("t-%05d", i)))
	}
	c, r, _ := newFakeClient(b, objs...)
	reconcilePool(b, r, "p")
	reportApplied(b, c)
	reconcilePool(b, r, "p") // the ticket key issues; every assignment carries it
	ctx := context.Background()
	for _, mode := range []string{"leave", "join"} {
		b.Run(mode, func(b *testing.B) {
			var cpu time.Duration
			var aw, ad, tw int64
			i := 0
			for b.Loop() {
				gw := fmt.Sprintf("gw-%03d", (i*37)%gateways)
				i++
				lease := newLease("p", gw, fmt.Sprintf("z%d", (i*37)%3), now)
				b.StopTimer()
				if mode == "join" {
					if err := c.Delete(ctx, lease); err != nil {
						b.Fatal(err)
					}
					reconcilePool(b, r, "p")
				}
				a0, d0, t0 := r.Stats.AssignmentWrites.Load(), r.Stats.AssignmentDeletes.Load(), r.Stats.TunnelStatusWrites.Load()
				var err error
				if mode == "join" {
					lease.ResourceVersion = ""
					err = c.Create(ctx, lease)
				} else {
					err = c.Delete(ctx, lease)
				}
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				c0 := cpuTime()
				reconcilePool(b, r, "p")
				cpu += cpuTime() - c0
				b.StopTimer()
				aw += r.Stats.AssignmentWrites.Load() - a0
				ad += r.Stats.AssignmentDeletes.Load() - d0
				tw += r.Stats.TunnelStatusWrites.Load() - t0
				if mode == "leave" {
					lease.ResourceVersion = ""
					if err := c.Create(ctx, lease); err != nil {
						b.Fatal(err)
					}
					reconcilePool(b, r, "p")
				}
				b.StartTimer()
			}
			n := float64(b.N)
			b.ReportMetric(cpu.Seconds()/n, "cpu-s/op")
			b.ReportMetric(float64(aw)/n, "assignment-writes/op")
			b.ReportMetric(float64(ad)/n, "assignment-deletes/op")
			b.ReportMetric(float64(tw)/n, "tunnel-status-writes/op")
		})
	}
}
