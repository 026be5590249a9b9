package gateway

import (
	"testing"

	"github.com/sluicegw/sluice/ike"
)

// Every counter of ike.Stats has a snake_case name of its own.
func TestIKEStatsNames(t *testing.T) {
	m := IKEStatsMap(ike.Stats{RxIntegrityFailed: 3, IKESAEstablished: 1})
	for _, k := range []string{"rx_integrity_failed", "ike_sa_established", "child_sa_established", "ts_unacceptable", "invalid_ke", "rx_unsupported_crit"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in %v", k, m)
		}
	}
	if m["rx_integrity_failed"] != 3 || m["ike_sa_established"] != 1 {
		t.Errorf("values %v", m)
	}
}
