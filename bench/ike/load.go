package ikebench

// The load generator: road warriors made of package ike's Endpoint, one
// per IKE SA, each on its own pair of UDP ports in the load namespace.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/internal/lab"
)

// Ports of the responders.
const (
	respIKEPort  = 500
	respNATTPort = 4500
)

// firstPort is the first local port of a road warrior; each takes two
// (its IKE port and its NAT-T port).
const firstPort = 10000

// maxPerAddr bounds the road warriors of one source address (the ports
// from firstPort up).
const maxPerAddr = (65536 - firstPort) / 2

// setupTimeout bounds one setup (the initiator's retransmissions, 4 s
// and more apart by default, fit several times).
const setupTimeout = 60 * time.Second

// portTransport is an ike.Transport over two UDP sockets of one road
// warrior on ports P and P+1, which its Endpoint takes as its IKE and
// NAT-T ports (ike.Config.Port and NATTPort). An Endpoint sends from and
// to the same port number; portTransport sends what goes to port P to the
// responder's 500 and what goes to P+1 to its 4500, and maps the answers
// back, so that one namespace holds thousands of distinct road warriors
// without an address each. (What ike could offer instead: a Config field
// for the remote IKE port, or a Peer.RemotePort.)
type portTransport struct {
	conns [2]*net.UDPConn
	local [2]netip.AddrPort
	wg    sync.WaitGroup
}

// newPortTransport opens the sockets of ports port and port+1 on addr in
// ns.
func newPortTransport(ns *lab.Netns, addr netip.Addr, port uint16) (*portTransport, error) {
	t := &portTransport{}
	for i := range t.conns {
		t.local[i] = netip.AddrPortFrom(addr, port+uint16(i))
		c, err := ns.ListenUDP(t.local[i])
		if err != nil {
			t.close()
			return nil, err
		}
		t.conns[i] = c
	}
	return t, nil
}

// Send implements ike.Transport.
func (t *portTransport) Send(local, remote netip.AddrPort, pkt []byte) error {
	for i, l := range t.local {
		if l != local {
			continue
		}
		to := uint16(respIKEPort)
		if remote.Port() == t.local[1].Port() {
			to = respNATTPort
		}
		_, err := t.conns[i].WriteToUDPAddrPort(pkt, netip.AddrPortFrom(remote.Addr(), to))
		return err
	}
	return fmt.Errorf("ikebench: no socket on %v", local)
}

// serve hands what each socket reads to e, with the responder's port
// mapped to the one e expects, until close.
func (t *portTransport) serve(e *ike.Endpoint) {
	for i, c := range t.conns {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			buf := make([]byte, 65536)
			for {
				n, from, err := c.ReadFromUDPAddrPort(buf)
				if err != nil {
					if errors.Is(err, net.ErrClosed) {
						return
					}
					continue
				}
				port := t.local[0].Port()
				if from.Port() == respNATTPort {
					port = t.local[1].Port()
				}
				e.Receive(t.local[i], netip.AddrPortFrom(from.Addr().Unmap(), port), buf[:n])
			}
		}()
	}
}

// close closes the sockets and waits for serve's goroutines.
func (t *portTransport) close() {
	for _, c := range t.conns {
		if c != nil {
			c.Close()
		}
	}
	t.wg.Wait()
}

// roadWarrior is one initiator: its Endpoint and its sockets.
type roadWarrior struct {
	ep *ike.Endpoint
	tr *portTransport
}

func (r *roadWarrior) close() {
	r.ep.Close()
	r.tr.close()
}

// target is what the load generator initiates to.
type target struct {
	ns       *lab.Netns   // the load generator's namespace
	sources  []netip.Addr // one per worker
	remote   netip.Addr   // the responder
	remoteID ike.Identity
	creds    *credentials
	ike      []ike.Proposal
	esp      []ike.Proposal
	site     netip.Prefix // the responder's side (TSr)
}

// loadResult is what one load run measured at the initiators.
type loadResult struct {
	completed int
	failed    int
	firstErr  error
	latencies []time.Duration // of the completed setups, sorted
	elapsed   time.Duration   // first request to last completion
}

// innerAddr is road warrior i's inner address (its TSi): 10.128.0.0/16
// counted up.
func innerAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 128, byte(i >> 8), byte(i)})
}

// warriorID is road warrior i's identity.
func warriorID(i int) string { return fmt.Sprintf("rw%d@bench.sluice", i) }

// runLoad makes count road warriors' setups, concurrency at a time (one
// worker per source address), until count or until duration has passed.
// The road warriors stay up; the caller closes them (closeAll).
func runLoad(ctx context.Context, t *target, count, concurrency int, duration time.Duration, progress func(done int)) (*loadResult, []*roadWarrior) {
	var (
		next     atomic.Int64
		done     atomic.Int64
		mu       sync.Mutex
		res      loadResult
		warriors []*roadWarrior
		last     time.Time
		wg       sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(duration)
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				i := int(next.Add(1)) - 1
				if i >= count || ctx.Err() != nil || (duration > 0 && time.Now().After(deadline)) || k >= maxPerAddr {
					return
				}
				rw, lat, err := setupOne(ctx, t, i, t.sources[w], uint16(firstPort+2*k))
				mu.Lock()
				if rw != nil {
					warriors = append(warriors, rw)
				}
				if err != nil {
					res.failed++
					if res.firstErr == nil {
						res.firstErr = err
					}
				} else {
					res.completed++
					res.latencies = append(res.latencies, lat)
					last = time.Now()
				}
				mu.Unlock()
				if progress != nil {
					progress(int(done.Add(1)))
				}
			}
		}()
	}
	wg.Wait()
	if !last.IsZero() {
		res.elapsed = last.Sub(start)
	}
	slices.Sort(res.latencies)
	return &res, warriors
}

// setupOne initiates road warrior i from src:port and port+1 and returns
// it (also when the setup failed, for closing) with the time Initiate
// took.
func setupOne(ctx context.Context, t *target, i int, src netip.Addr, port uint16) (*roadWarrior, time.Duration, error) {
	tr, err := newPortTransport(t.ns, src, port)
	if err != nil {
		return nil, 0, err
	}
	peer := &ike.Peer{
		Name: "gw", Local: src, Remote: t.remote,
		LocalID: ike.ParseIdentity(warriorID(i)), RemoteID: t.remoteID,
		IKE: t.ike, ESP: t.esp,
		LocalTS:  []netip.Prefix{netip.PrefixFrom(innerAddr(i), 32)},
		RemoteTS: []netip.Prefix{t.site},
		NoMOBIKE: true,
	}
	if err := t.creds.initiator(peer, i); err != nil {
		tr.close()
		return nil, 0, err
	}
	ep, err := ike.NewEndpoint(ike.Config{Peers: []*ike.Peer{peer}, Port: port, NATTPort: port + 1}, tr)
	if err != nil {
		tr.close()
		return nil, 0, err
	}
	tr.serve(ep)
	rw := &roadWarrior{ep: ep, tr: tr}
	cctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	t0 := time.Now()
	_, err = ep.Initiate(cctx, peer.Name)
	lat := time.Since(t0)
	if err != nil {
		return rw, lat, fmt.Errorf("road warrior %d (%v:%d): %w", i, src, port, err)
	}
	return rw, lat, nil
}

// closeAll closes the road warriors, a few at a time.
func closeAll(rws []*roadWarrior) {
	var wg sync.WaitGroup
	ch := make(chan *roadWarrior)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range ch {
				r.close()
			}
		}()
	}
	for _, r := range rws {
		ch <- r
	}
	close(ch)
	wg.Wait()
}

// percentile is the nearest-rank p-th percentile of sorted ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	k := int(p/100*float64(len(ds))+0.999999) - 1
	return ds[max(0, min(k, len(ds)-1))]
}
