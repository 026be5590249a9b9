package tlsbench

// The servers' CPU time from /proc: utime + stime of every process of a
// server (nginx's master and workers; sluice's one process), summed.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTicks is the unit of /proc/PID/stat's CPU times (USER_HZ, 100 on
// every Linux architecture Go supports).
const clockTicks = 100

// procStat is what the bench reads from one /proc/PID/stat line.
type procStat struct {
	PPID int
	CPU  time.Duration // utime + stime
}

// parseProcStat reads the parent pid (field 4) and utime and stime
// (fields 14 and 15) of a /proc/PID/stat line. The command name (field 2)
// may hold spaces and parentheses, so fields are counted from the last
// ')'.
func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("tlsbench: /proc/PID/stat: no ')'")
	}
	fs := bytes.Fields(b[i+1:])
	// fs[0] is the state (field 3), fs[1] ppid (4), fs[11] utime (14),
	// fs[12] stime (15).
	if len(fs) < 13 {
		return procStat{}, fmt.Errorf("tlsbench: /proc/PID/stat: %d fields after the name, want at least 13", len(fs))
	}
	ppid, err0 := strconv.Atoi(string(fs[1]))
	ut, err1 := strconv.ParseUint(string(fs[11]), 10, 64)
	st, err2 := strconv.ParseUint(string(fs[12]), 10, 64)
	if err := errors.Join(err0, err1, err2); err != nil {
		return procStat{}, fmt.Errorf("tlsbench: /proc/PID/stat: %w", err)
	}
	return procStat{PPID: ppid, CPU: time.Duration(ut+st) * time.Second / clockTicks}, nil
}

// readProcStat reads /proc/PID/stat of pid under root ("/proc").
func readProcStat(root string, pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", root, pid))
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(b)
}

// treeCPU returns the CPU time process pid and all its descendants have
// used so far, and how many processes that is, from the proc file system
// at root. A process that exits while it is read is left out (its time
// is lost: the servers' processes live as long as the bench's windows).
func treeCPU(root string, pid int) (time.Duration, int, error) {
	top, err := readProcStat(root, pid)
	if err != nil {
		return 0, 0, fmt.Errorf("tlsbench: cpu time of %d: %w", pid, err)
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return 0, 0, err
	}
	stats := map[int]procStat{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == pid {
			continue
		}
		if st, err := readProcStat(root, p); err == nil {
			stats[p] = st
		}
	}
	sum, n := top.CPU, 1
	parents := map[int]bool{pid: true}
	// Descendants: repeat until no process joins (trees are shallow).
	for grew := true; grew; {
		grew = false
		for p, st := range stats {
			if parents[st.PPID] && !parents[p] {
				parents[p] = true
				sum += st.CPU
				n++
				grew = true
			}
		}
	}
	return sum, n, nil
}
