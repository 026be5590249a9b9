package tls

import (
	gotls "crypto/tls"
	"net"
	"testing"
)

// BenchmarkHandshake measures full TLS 1.3 handshakes per second against a
// listener, client and server in one process (so the figure is a
// relative one: engines and key types against each other).
//
//	go test -run XXX -bench Handshake ./tls/
func BenchmarkHandshake(b *testing.B) {
	for _, eng := range testEngines {
		for _, kt := range keyTypes {
			b.Run(eng+"/"+kt, func(b *testing.B) {
				dir := b.TempDir()
				ca := newCA(b, dir, "root")
				cert := ca.issue(b, dir, "site", kt, false, "site.test")
				s, err := Start(Config{Listeners: []ListenerConfig{{
					Name: "web", Listen: "127.0.0.1:0", Certs: []Cert{cert}, Engine: eng, Backend: "static:" + dir,
				}}}, Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				addr := addrOf(b, s, "web")
				conf := &gotls.Config{RootCAs: ca.pool(), ServerName: "site.test"}
				b.SetParallelism(8)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						raw, err := net.Dial("tcp", addr)
						if err != nil {
							b.Error(err)
							return
						}
						c := gotls.Client(raw, conf)
						if err := c.Handshake(); err != nil {
							b.Error(err)
						}
						c.Close()
					}
				})
				b.StopTimer()
				st := statsOf(b, s, "web")
				b.ReportMetric(float64(st.SignOps)/float64(max(1, st.SignBatches)), "sigs/batch")
			})
		}
	}
}
