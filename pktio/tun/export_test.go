package tun

// SetPartialChecksum turns the partial checksum (NEEDS_CSUM) of single
// TCP and UDP packets on or off, so that a test can show what it changes.
func SetPartialChecksum(q *Queue, on bool) { q.partial = on }
