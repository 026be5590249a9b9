//go:build race

package bench

// raceEnabled: the race detector makes sync.Pool drop items on purpose and
// adds its own bookkeeping, so allocation counts mean nothing under it.
const raceEnabled = true
