package sched

import "golang.org/x/sys/unix"

// lowerThreadPriority sets the calling thread's nice value to nice (a
// thread's own, on Linux: setpriority with its thread ID). It reports
// whether it could.
func lowerThreadPriority(nice int) bool {
	return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice) == nil
}

// threadNice returns the calling thread's nice value.
func threadNice() (int, error) {
	// The system call returns 20 - nice, so that it is never negative.
	p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	return 20 - p, err
}
