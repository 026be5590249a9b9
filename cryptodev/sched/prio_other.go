//go:build !linux

package sched

import "errors"

// lowerThreadPriority does nothing outside Linux: thread priorities there
// are not per thread through setpriority.
func lowerThreadPriority(int) bool { return false }

func threadNice() (int, error) { return 0, errors.New("sched: thread priority: not on this system") }
