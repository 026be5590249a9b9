//go:build race

package e2e_test

// raceEnabled: this test binary runs with the race detector, and so does
// the sluice it builds.
const raceEnabled = true

// slowdown stretches the tests' traffic durations for a daemon built with
// the race detector, which moves packets several times slower.
const slowdown = 3
