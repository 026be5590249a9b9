package ha

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// witnessLoop probes the witness every Interval, for fencing.
func (m *Member) witnessLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		if m.probeWitness() {
			m.witnessOK.Store(time.Now().UnixNano())
		}
		select {
		case <-t.C:
		case <-m.ctx.Done():
			return
		}
	}
}

// witnessReachable probes the witness now; true without one.
func (m *Member) witnessReachable() bool {
	if m.cfg.Witness == "" {
		return true
	}
	if m.probeWitness() {
		m.witnessOK.Store(time.Now().UnixNano())
		return true
	}
	return false
}

// probeWitness reports whether a TCP connect to the witness succeeds or
// is refused within Interval: either way the network to it works.
func (m *Member) probeWitness() bool {
	d := net.Dialer{Timeout: m.cfg.Interval}
	c, err := d.DialContext(m.ctx, "tcp", m.cfg.Witness)
	if err == nil {
		c.Close()
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}
